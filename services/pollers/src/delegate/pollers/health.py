"""What the pollers are doing right now, per channel side: set by the workers, read by the
``pollers.cmd.state`` answer and the ping's readiness."""

from dataclasses import dataclass, field
from datetime import datetime

from delegate.contracts.channels import ChannelHealth, ChannelsState
from delegate.contracts.ids import utcnow


@dataclass
class Side:
    enabled: bool = False
    state: str = "off"
    detail: str = ""
    last_ok_at: datetime | None = None
    last_error: str | None = None

    def ok(self, state: str, detail: str = "") -> None:
        self.state, self.detail, self.last_ok_at, self.last_error = state, detail, utcnow(), None

    def failing(self, error: str, state: str = "failing") -> None:
        self.state, self.last_error = state, error[:500]

    @property
    def healthy(self) -> bool:
        return not self.enabled or self.state not in ("failing", "connecting", "off")

    def view(self) -> ChannelHealth:
        return ChannelHealth(
            enabled=self.enabled, ok=self.enabled and self.healthy, state=self.state, detail=self.detail,
            last_ok_at=self.last_ok_at, last_error=self.last_error,
        )


@dataclass
class Health:
    imap: Side = field(default_factory=Side)
    smtp: Side = field(default_factory=Side)
    sms: Side = field(default_factory=Side)
    calendar: Side = field(default_factory=Side)  # CalDAV: shown in the ping's detail
    last_poll_at: datetime | None = None
    outbox_pending: int = 0
    running: bool = False  # the workers started (the outbox consumers exist)

    def polled(self) -> None:
        self.last_poll_at = utcnow()

    def state(self) -> ChannelsState:
        return ChannelsState(
            imap=self.imap.view(), smtp=self.smtp.view(), sms=self.sms.view(),
            last_poll_at=self.last_poll_at, outbox_pending=self.outbox_pending,
        )

    @property
    def ready(self) -> bool:
        """Ready once the workers run and every configured side works (IMAP connected)."""
        return self.running and self.imap.healthy

    def detail(self) -> str:
        parts = []
        for name, side in (("imap", self.imap), ("smtp", self.smtp), ("sms", self.sms), ("calendar", self.calendar)):
            error = f" ({side.last_error})" if side.last_error and side.enabled else ""
            parts.append(f"{name} {side.state if side.enabled else 'off'}{error}")
        return "; ".join(parts)
