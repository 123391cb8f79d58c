"""Server event framing and the `error` event clients get for a bad client event."""

import secrets
from typing import Any

Event = dict[str, Any]


def new_event_id() -> str:
    return f"event_{secrets.token_hex(12)}"


def server_event(kind: str, **fields: Any) -> Event:
    return {"type": kind, "event_id": new_event_id(), **fields}


class EventError(Exception):
    """A client event the server refuses: answered with an `error` event, the socket
    stays open (the real API never closes for these)."""

    def __init__(
        self,
        message: str,
        *,
        code: str = "invalid_value",
        param: str | None = None,
        kind: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.param = param
        self.kind = kind


def error_event(error: EventError, client_event_id: str | None) -> Event:
    return server_event(
        "error",
        error={
            "type": error.kind,
            "code": error.code,
            "message": error.message,
            "param": error.param,
            "event_id": client_event_id,
        },
    )
