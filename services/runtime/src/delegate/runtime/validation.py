"""Validation errors in words: shared by the bus and by processes that never touch NATS."""

from pydantic import ValidationError


def describe(exc: ValidationError) -> str:
    """A validation error in one line: how many, and the first one's place and message."""
    errors = exc.errors()
    if not errors:
        return f"{exc.error_count()} validation error(s): {exc}"
    where = ".".join(str(p) for p in errors[0]["loc"])
    return f"{exc.error_count()} validation error(s); first at {where or 'top'}: {errors[0]['msg']}"
