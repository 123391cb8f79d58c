"""Spend against the owner's budgets, derived from committed ``model.usage`` events (issue #29).

One projection (``SpendBook``) shared by every service that must stop at the line: the inner
plane (activations, memory extraction, capsule refreshes) and the tasks service (task steps).
Each folds the ledger's ``model.usage`` events itself, in seq order, so a restart, a failover or
a projection rebuilt from the ledger arrives at the same figures; nothing is counted in memory
only. Totals are kept per period key, so "spent this day / month / purpose" is a dict lookup.

Periods are the owner's calendar day and month in OWNER_TIMEZONE; BUDGET_PERIOD_S > 0 replaces
them by fixed windows of that length (a "day"; a "month" is 30 of them), for demos and tests,
counted from BUDGET_PERIOD_ORIGIN (epoch seconds; 0, the epoch, unless set): a demo or a test
that sets it to when it starts has a whole fresh period then, instead of waiting for one.
"""

from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from delegate.contracts.events import Event, ModelUsage

# Work nobody asked for just now: held at the line. Owner turns, voice and compaction are not.
BACKGROUND = frozenset({"activation", "task_step", "memory_extraction", "capsule"})
MONTH_OF_SHORT_PERIODS = 30
RUNAWAY_WINDOW = timedelta(minutes=1)

HoldReason = Literal["budget_usd", "runaway"]


def known_timezone(value: str) -> str:
    """OWNER_TIMEZONE's check, for every settings class that reads it: an IANA zone name."""
    try:
        ZoneInfo(value)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"OWNER_TIMEZONE {value!r} is not an IANA time zone (e.g. Europe/Berlin)") from exc
    return value


class BudgetSettings(BaseModel):
    """The BUDGET_* settings; a service's settings class derives from this beside ServiceSettings."""

    budget_daily_usd: float | None = Field(default=None, ge=0)  # BUDGET_DAILY_USD; unset: no daily line
    budget_monthly_usd: float | None = Field(default=None, ge=0)  # BUDGET_MONTHLY_USD
    # Optional daily caps of one kind of background work (each also counts toward the day's line).
    budget_activation_daily_usd: float | None = Field(default=None, ge=0)  # BUDGET_ACTIVATION_DAILY_USD
    budget_task_daily_usd: float | None = Field(default=None, ge=0)  # BUDGET_TASK_DAILY_USD
    budget_extraction_daily_usd: float | None = Field(default=None, ge=0)  # BUDGET_EXTRACTION_DAILY_USD
    budget_capsule_daily_usd: float | None = Field(default=None, ge=0)  # BUDGET_CAPSULE_DAILY_USD
    # Owner turns over budget still run unless this is true (then they are refused, saying why).
    budget_hard_stop_owner: bool = False  # BUDGET_HARD_STOP_OWNER
    # The runaway guard: more background model calls than this in a minute hold background work
    # for BUDGET_RUNAWAY_PAUSE_S. 0: no guard.
    budget_background_calls_per_min: int = Field(default=60, ge=0)  # BUDGET_BACKGROUND_CALLS_PER_MIN
    budget_runaway_pause_s: float = Field(default=3600.0, gt=0)  # BUDGET_RUNAWAY_PAUSE_S
    budget_period_s: float = Field(default=0.0, ge=0)  # BUDGET_PERIOD_S; 0: calendar day and month
    # Epoch seconds the BUDGET_PERIOD_S windows are counted from; ignored with calendar periods.
    budget_period_origin: float = Field(default=0.0, ge=0)  # BUDGET_PERIOD_ORIGIN

    # The owner's clock: a day and a month are the owner's (a service may define it too, alike).
    owner_timezone: str = "UTC"  # OWNER_TIMEZONE (an IANA name, e.g. Europe/Berlin)

    @field_validator("owner_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        return known_timezone(value)

    @property
    def limits(self) -> "Limits":
        return self.budget_limits(ZoneInfo(self.owner_timezone))

    def budget_limits(self, zone: ZoneInfo) -> "Limits":
        caps = {
            "activation": self.budget_activation_daily_usd,
            "task_step": self.budget_task_daily_usd,
            "memory_extraction": self.budget_extraction_daily_usd,
            "capsule": self.budget_capsule_daily_usd,
        }
        return Limits(
            daily=self.budget_daily_usd, monthly=self.budget_monthly_usd,
            purpose_daily={k: v for k, v in caps.items() if v is not None},
            calls_per_min=self.budget_background_calls_per_min,
            runaway_pause=timedelta(seconds=self.budget_runaway_pause_s),
            periods=Periods(zone, self.budget_period_s, self.budget_period_origin),
        )


@dataclass(frozen=True)
class Periods:
    """The owner's day and month: keys of ``now`` and when the current one ends."""

    zone: ZoneInfo
    short_s: float = 0.0
    origin: float = 0.0  # epoch seconds the short windows are counted from

    def day(self, moment: datetime) -> str:
        if self.short_s:
            return f"p{self._window(moment, self.short_s)}{self._from()}"
        return moment.astimezone(self.zone).date().isoformat()

    def month(self, moment: datetime) -> str:
        if self.short_s:
            return f"m{self._window(moment, self.short_s * MONTH_OF_SHORT_PERIODS)}{self._from()}"
        return moment.astimezone(self.zone).strftime("%Y-%m")

    def day_end(self, moment: datetime) -> datetime:
        if self.short_s:
            return self._window_end(moment, self.short_s)
        tomorrow = moment.astimezone(self.zone).date() + timedelta(days=1)
        return datetime.combine(tomorrow, time(0), tzinfo=self.zone).astimezone(UTC)

    def month_end(self, moment: datetime) -> datetime:
        if self.short_s:
            return self._window_end(moment, self.short_s * MONTH_OF_SHORT_PERIODS)
        local = moment.astimezone(self.zone).date().replace(day=1)
        first = (local.replace(year=local.year + 1, month=1) if local.month == 12
                 else local.replace(month=local.month + 1))
        return datetime.combine(first, time(0), tzinfo=self.zone).astimezone(UTC)

    def _window(self, moment: datetime, length: float) -> int:
        return int((moment.timestamp() - self.origin) // length)

    def _window_end(self, moment: datetime, length: float) -> datetime:
        return datetime.fromtimestamp(self.origin + (self._window(moment, length) + 1) * length, UTC)

    def _from(self) -> str:
        # Window n of another origin is another period: its key must not match one already told
        # of (a notice is once per key). Without an origin the keys stay what they always were.
        return f"@{self.origin!r}" if self.origin else ""


@dataclass(frozen=True)
class Limits:
    daily: float | None
    monthly: float | None
    purpose_daily: dict[str, float]
    calls_per_min: int
    runaway_pause: timedelta
    periods: Periods


@dataclass(frozen=True)
class Hold:
    """Why background work waits, until when, and the figures the owner is told."""

    reason: HoldReason
    scope: str  # "day", "month", "day:<purpose>" or "runaway"
    period: str  # the period key: one owner notice per (scope, period)
    until: datetime
    detail: str


class SpendBook(BaseModel):
    """Totals in USD per period key, folded from committed ``model.usage`` events (JSON-able, so a
    service can keep it in its state file). Unpriced calls count as $0 and are counted apart."""

    model_config = ConfigDict(extra="ignore")

    last_seq: int = 0  # the newest usage event folded in (a second fold of it changes nothing)
    day: dict[str, float] = Field(default_factory=dict)
    month: dict[str, float] = Field(default_factory=dict)
    day_purpose: dict[str, dict[str, float]] = Field(default_factory=dict)
    unpriced_calls: dict[str, int] = Field(default_factory=dict)  # per day
    background_calls: list[datetime] = Field(default_factory=list)  # within the last minute, oldest first
    runaway_at: datetime | None = None  # when the guard last tripped (the tripping call's time)
    runaway_calls: int = 0
    # What the newest model call of each purpose cost: the estimate of the next one, so work whose
    # next call would pass a line is not started ("a budget just above one turn's cost").
    last_call: dict[str, float] = Field(default_factory=dict)

    def apply(self, event: Event, limits: Limits) -> bool:
        """Fold one committed event; True when it was a usage event seen for the first time."""
        if event.kind != ModelUsage.KIND or event.seq is None or event.seq <= self.last_seq:
            return False
        self.last_seq = event.seq
        usage = event.typed(ModelUsage)
        periods = limits.periods
        day, month = periods.day(event.ts), periods.month(event.ts)
        cost = usage.cost_usd or 0.0
        if usage.cost_usd is None:
            self.unpriced_calls[day] = self.unpriced_calls.get(day, 0) + 1
        self.day[day] = self.day.get(day, 0.0) + cost
        self.month[month] = self.month.get(month, 0.0) + cost
        purposes = self.day_purpose.setdefault(day, {})
        purposes[usage.purpose] = purposes.get(usage.purpose, 0.0) + cost
        self.last_call[usage.purpose] = cost
        if usage.purpose in BACKGROUND:
            self._count_background(event.ts, limits)
        self._prune(event.ts, periods)
        return True

    def _count_background(self, ts: datetime, limits: Limits) -> None:
        calls = deque(c for c in self.background_calls if c > ts - RUNAWAY_WINDOW)
        calls.append(ts)
        self.background_calls = list(calls)
        tripped = bool(limits.calls_per_min) and len(calls) > limits.calls_per_min
        if tripped and (self.runaway_at is None or ts >= self.runaway_at + limits.runaway_pause):
            self.runaway_at, self.runaway_calls = ts, len(calls)

    def _prune(self, now: datetime, periods: Periods) -> None:
        # Two periods back is the furthest any rule looks (a late event of yesterday).
        keep_days = {periods.day(now), periods.day(now - _period(periods, day=True))}
        keep_months = {periods.month(now), periods.month(now - _period(periods, day=False))}
        for table, keep in ((self.day, keep_days), (self.day_purpose, keep_days), (self.unpriced_calls, keep_days),
                            (self.month, keep_months)):
            for key in [k for k in table if k not in keep]:
                del table[key]

    # ---- what the projection answers --------------------------------------------------------

    def spent_day(self, now: datetime, periods: Periods) -> float:
        return self.day.get(periods.day(now), 0.0)

    def spent_month(self, now: datetime, periods: Periods) -> float:
        return self.month.get(periods.month(now), 0.0)

    def spent_purpose(self, now: datetime, periods: Periods, purpose: str) -> float:
        return self.day_purpose.get(periods.day(now), {}).get(purpose, 0.0)

    def next_cost(self, purpose: str) -> float:
        return self.last_call.get(purpose, 0.0)

    def over(self, now: datetime, limits: Limits, need: float = 0.0) -> Hold | None:
        """The line (daily first, then monthly) that spend has reached, or would pass with ``need``
        more; whatever the work. None when there is room."""
        periods = limits.periods
        day = self.spent_day(now, periods)
        if limits.daily is not None and _reached(day, need, limits.daily):
            return Hold("budget_usd", "day", periods.day(now), periods.day_end(now),
                        f"spent ${day:.4f} of the daily budget ${limits.daily:.4f}{_zone(periods)}{_need(need)}")
        month = self.spent_month(now, periods)
        if limits.monthly is not None and _reached(month, need, limits.monthly):
            return Hold("budget_usd", "month", periods.month(now), periods.month_end(now),
                        f"spent ${month:.4f} of the monthly budget ${limits.monthly:.4f}{_zone(periods)}"
                        f"{_need(need)}")
        return None

    def hold(self, now: datetime, limits: Limits, purpose: str) -> Hold | None:
        """Why background work of ``purpose`` may not call the model at ``now``, or None."""
        need = self.next_cost(purpose)
        over = self.over(now, limits, need)
        if over is not None:
            return over
        periods = limits.periods
        cap = limits.purpose_daily.get(purpose)
        spent = self.spent_purpose(now, periods, purpose)
        if cap is not None and _reached(spent, need, cap):
            return Hold("budget_usd", f"day:{purpose}", periods.day(now), periods.day_end(now),
                        f"spent ${spent:.4f} on {purpose} today, its cap is ${cap:.2f}")
        runaway = self.runaway(now, limits)
        if runaway is not None:
            return runaway
        return None

    def runaway(self, now: datetime, limits: Limits) -> Hold | None:
        if self.runaway_at is None or now >= self.runaway_at + limits.runaway_pause:
            return None
        until = self.runaway_at + limits.runaway_pause
        return Hold("runaway", "runaway", self.runaway_at.isoformat(), until,
                    f"{self.runaway_calls} background model calls within a minute "
                    f"(the guard allows {limits.calls_per_min})")


def _reached(spent: float, need: float, limit: float) -> bool:
    # At the line, or the next call (as much as the last one of its kind) would pass it. Nothing
    # spent yet in the period: the first call runs, even one dearer than the whole line.
    return spent >= limit or (spent > 0 and need > 0 and spent + need > limit)


def _need(need: float) -> str:
    return f"; the next one costs about ${need:.4f}" if need > 0 else ""


def _period(periods: Periods, *, day: bool) -> timedelta:
    if periods.short_s:
        return timedelta(seconds=periods.short_s * (1 if day else MONTH_OF_SHORT_PERIODS))
    return timedelta(days=1 if day else 31)


def _zone(periods: Periods) -> str:
    return "" if periods.short_s else f" ({periods.zone.key})"
