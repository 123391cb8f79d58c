"""Object ids with the prefixes the real API uses (`resp_`, `msg_`, `fc_`, ...)."""

import secrets


def new_id(prefix: str) -> str:
    # Real ids are long hex strings; callers must treat them as opaque anyway.
    return f"{prefix}_{secrets.token_hex(24)}"


def new_call_id() -> str:
    return f"call_{secrets.token_urlsafe(18).replace('-', 'x').replace('_', 'y')}"


def new_request_id() -> str:
    return f"req_{secrets.token_hex(16)}"
