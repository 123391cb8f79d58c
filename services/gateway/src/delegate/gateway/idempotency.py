"""The ``Idempotency-Key`` header: a script's retry of a write names the same change as its first try."""

from fastapi import Request

from .errors import ApiError

MAX_KEY = 200
HEADER = "idempotency-key"


def idempotency_key(request: Request) -> str | None:
    """The header's key (trimmed), None without one; 400 when it is empty or too long."""
    value = request.headers.get(HEADER)
    if value is None:
        return None
    key = value.strip()
    if not 1 <= len(key) <= MAX_KEY:
        raise ApiError(400, "bad_request", f"Idempotency-Key: must be 1 to {MAX_KEY} characters")
    return key
