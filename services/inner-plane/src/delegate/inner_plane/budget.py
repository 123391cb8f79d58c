"""The interruption budget: at most N proactive wakes per owner-local day, at least M seconds apart.

Counted from the times of committed ``act`` decisions (``BrokerState.wakes``), so a restarted
broker counts what the ledger says. Urgent signals bypass it and are not counted in it.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

# What the state keeps: a day is the longest any rule here looks back.
KEEP = timedelta(days=2)


@dataclass(frozen=True)
class Limit:
    reason: str  # "budget" (the day's wakes are used up) or "wake_gap" (too soon after the last)
    until: datetime
    detail: str


@dataclass(frozen=True)
class Budget:
    daily: int
    min_gap: timedelta
    zone: ZoneInfo

    def next_day(self, now: datetime) -> datetime:
        """The owner's next local midnight (a DST day is 23 or 25 hours long)."""
        tomorrow = now.astimezone(self.zone).date() + timedelta(days=1)
        return datetime.combine(tomorrow, time(0), tzinfo=self.zone).astimezone(UTC)

    def limit(self, wakes: Sequence[datetime], now: datetime) -> Limit | None:
        """Why a proactive wake may not happen at ``now``, or None when it may."""
        today = now.astimezone(self.zone).date()
        used = sum(1 for w in wakes if w.astimezone(self.zone).date() == today)
        if used >= self.daily:
            until = self.next_day(now)
            return Limit(
                "budget",
                until,
                f"{used} of {self.daily} proactive activations used today; "
                f"the next may come at {until.astimezone(self.zone):%H:%M} {self.zone.key}",
            )
        if wakes:
            last = max(wakes)
            until = last + self.min_gap
            if now < until:
                return Limit(
                    "wake_gap",
                    until,
                    f"woke the owner {(now - last).total_seconds():.0f} s ago; at least "
                    f"{self.min_gap.total_seconds():.0f} s between wakes "
                    f"(until {until.astimezone(self.zone):%H:%M:%S} {self.zone.key})",
                )
        return None


def prune(wakes: list[datetime], now: datetime) -> list[datetime]:
    return [w for w in wakes if w > now - KEEP]
