"""QUIET_HOURS: a daily window of the owner's local time in which non-urgent signals wait.

"22:00-07:00" (HH:MM[:SS]-HH:MM[:SS]) may wrap midnight. Wall times are read in the owner's
zone with zoneinfo, so a window keeps its local hours across DST changes; a boundary that
falls into a skipped hour (spring forward) lands on the same wall time's UTC reading.
"""

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo


class QuietHoursError(ValueError):
    pass


_TIME = re.compile(r"\d{2}:\d{2}(:\d{2})?")


def parse_time(text: str) -> time:
    text = text.strip()
    try:
        if not _TIME.fullmatch(text):
            raise ValueError(text)
        return time.fromisoformat(text)
    except ValueError as exc:
        raise QuietHoursError(f"not a time of day (HH:MM[:SS]): {text!r}") from exc


@dataclass(frozen=True)
class QuietHours:
    start: time
    end: time
    zone: ZoneInfo

    @classmethod
    def parse(cls, spec: str, zone: ZoneInfo) -> "QuietHours | None":
        """None for an empty spec (no quiet hours)."""
        if not spec.strip():
            return None
        start, sep, end = spec.partition("-")
        if not sep:
            raise QuietHoursError(f"QUIET_HOURS must look like 22:00-07:00, not {spec!r}")
        hours = cls(parse_time(start), parse_time(end), zone)
        if hours.start == hours.end:
            raise QuietHoursError(f"QUIET_HOURS starts and ends at the same time: {spec!r}")
        return hours

    def _at(self, day: date, moment: time) -> datetime:
        # Through UTC and back: a wall time inside a DST gap becomes a real instant.
        return datetime.combine(day, moment, tzinfo=self.zone).astimezone(UTC)

    def end_of(self, now: datetime) -> datetime | None:
        """When the quiet window ``now`` is in ends (UTC), or None when ``now`` is not quiet."""
        today = now.astimezone(self.zone).date()
        # The window that may hold ``now`` began today or (wrapping midnight) yesterday.
        for began in (today, today - timedelta(days=1)):
            start = self._at(began, self.start)
            end_day = began if self.end > self.start else began + timedelta(days=1)
            end = self._at(end_day, self.end)
            if start <= now < end:
                return end
        return None

    def describe_end(self, end: datetime) -> str:
        local = end.astimezone(self.zone)
        return f"quiet hours until {local:%H:%M} {self.zone.key}"
