"""Query parameters as the routes read them: a 400 with a sentence, never a 422 or a trace."""

from .errors import ApiError


def parse_limit(value: str | None, *, default: int, most: int) -> int:
    """``limit`` as given (absent: ``default``), a whole number from 1 to ``most``."""
    if value is None:
        return default
    try:
        limit = int(value)
    except ValueError as exc:
        raise ApiError(400, "bad_limit", "limit must be a whole number") from exc
    if not 1 <= limit <= most:
        raise ApiError(400, "bad_limit", f"limit must be between 1 and {most}")
    return limit


def parse_bool(value: str | None, name: str) -> bool:
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no", ""):
        return False
    raise ApiError(400, "bad_request", f"{name} must be true or false")
