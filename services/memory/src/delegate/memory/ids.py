"""Ids this service derives from another id, so that redoing the same change (a retried edit,
a redelivered tool call) is deduplicated by the ledger instead of happening twice."""

import uuid

_NAMESPACE = uuid.UUID("9d3c6a1e-2f47-4b8e-a1c5-7e0d4b6f3a92")


def derived_id(kind: str, key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{kind}:{key}"))
