"""The opaque timeline cursor: the compound (timestamp, event id) key, base64url."""

import base64
import binascii
from dataclasses import dataclass
from datetime import datetime

from .ids import format_ts, parse_ts


class CursorError(ValueError):
    """A cursor that we did not make, or that was damaged on the way."""


@dataclass(frozen=True, order=True)
class Cursor:
    ts: datetime
    event_id: str

    def encode(self) -> str:
        raw = f"v1|{format_ts(self.ts)}|{self.event_id}".encode()
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    @property
    def ts_text(self) -> str:
        return format_ts(self.ts)

    @classmethod
    def decode(cls, text: str) -> "Cursor":
        if not text or len(text) > 512:
            raise CursorError("cursor is empty or too long")
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)).decode()
            version, ts_text, event_id = raw.split("|")
            if version != "v1" or not event_id or len(event_id) > 64:
                raise ValueError(raw)
            return cls(parse_ts(ts_text), event_id)
        except (binascii.Error, UnicodeDecodeError, ValueError) as exc:
            raise CursorError(f"malformed cursor: {text[:40]!r}") from exc
