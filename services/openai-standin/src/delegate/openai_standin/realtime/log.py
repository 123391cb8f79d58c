"""The record of every Realtime session (`GET /_standin/realtime/sessions`): client
events as received (input audio replaced by its byte length, ``received_at`` added),
server event types sent with the time their send began, truncations and cancels."""

import base64
import binascii
import copy
import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class SessionRecord:
    id: str
    model: str
    opened_at: float = field(default_factory=time.time)
    closed_at: float | None = None
    events: list[Any] = field(default_factory=list)
    sent: list[dict[str, Any]] = field(default_factory=list)
    truncations: list[dict[str, Any]] = field(default_factory=list)
    cancels: list[dict[str, Any]] = field(default_factory=list)

    def received(self, event: Any) -> None:
        at = time.time()  # arrival, for latency measurements (bench/voice.py)
        logged = _without_audio(event)
        if isinstance(logged, dict):
            logged["received_at"] = at
        self.events.append(logged)

    def sent_event(self, kind: str, at: float) -> None:
        """``at``: when the send began (a client can read the frame before the send returns)."""
        self.sent.append({"type": kind, "at": at})

    def dump(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "model": self.model,
            "opened_at": self.opened_at,
            "closed_at": self.closed_at,
            "events": list(self.events),
            "sent": list(self.sent),
            "truncations": list(self.truncations),
            "cancels": list(self.cancels),
        }


class RealtimeLog:
    def __init__(self) -> None:
        self._sessions: list[SessionRecord] = []

    def open(self, session_id: str, model: str) -> SessionRecord:
        record = SessionRecord(session_id, model)
        self._sessions.append(record)
        return record

    def sessions(self) -> list[dict[str, Any]]:
        return [record.dump() for record in self._sessions]

    def clear(self) -> None:
        self._sessions.clear()


def _without_audio(event: Any) -> Any:
    """Base64 audio (appends, input_audio parts) as its decoded length: logs stay small."""
    if not isinstance(event, dict):
        return event
    event = copy.deepcopy(event)
    if event.get("type") == "input_audio_buffer.append" and isinstance(event.get("audio"), str):
        event["audio"] = _byte_length(event["audio"])
    item = event.get("item")
    if isinstance(item, dict) and isinstance(item.get("content"), list):
        for part in item["content"]:
            if isinstance(part, dict) and isinstance(part.get("audio"), str):
                part["audio"] = _byte_length(part["audio"])
    return event


def _byte_length(data: str) -> int:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return -1
