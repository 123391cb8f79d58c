"""The spend projection: the owner's day and month, the lines, the per-purpose caps, the runaway guard."""

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from delegate.contracts.events import Event, ModelUsage, make_event
from delegate.runtime.spend import BudgetSettings, SpendBook

BERLIN = ZoneInfo("Europe/Berlin")


def usage(seq: int, ts: datetime, cost: float | None, purpose: str = "activation") -> Event:
    event = make_event(ModelUsage(model="gpt-5.5", purpose=purpose, cost_usd=cost),
                       conversation_id=None, span_id=None, channel="inner", ts=ts)
    return event.model_copy(update={"seq": seq})


def settings(**fields: object) -> BudgetSettings:
    return BudgetSettings.model_validate({"owner_timezone": "Europe/Berlin", **fields})


def test_a_day_is_the_owners_and_ends_at_her_midnight_across_dst() -> None:
    limits = settings(budget_daily_usd=1.0).limits
    book = SpendBook()
    # 23:30 UTC on 2026-10-24 is already Sunday the 25th in Berlin (the 25-hour day of the DST end).
    late = datetime(2026, 10, 24, 23, 30, tzinfo=UTC)
    assert book.apply(usage(1, late, 0.6), limits)
    assert book.spent_day(late, limits.periods) == 0.6
    assert book.spent_day(datetime(2026, 10, 24, 21, 0, tzinfo=UTC), limits.periods) == 0.0
    book.apply(usage(2, late + timedelta(minutes=5), 0.5), limits)
    hold = book.hold(late + timedelta(minutes=6), limits, "activation")
    assert hold is not None and hold.reason == "budget_usd" and hold.scope == "day" and hold.period == "2026-10-25"
    assert hold.until == datetime(2026, 10, 25, 23, 0, tzinfo=UTC)  # midnight CET, 25 hours after CEST's
    assert "(Europe/Berlin)" in hold.detail
    assert book.hold(hold.until, limits, "activation") is None


def test_an_event_folded_twice_counts_once_and_unpriced_calls_count_apart() -> None:
    limits = settings().limits
    book = SpendBook()
    now = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    event = usage(5, now, 0.25)
    assert book.apply(event, limits) and not book.apply(event, limits)
    book.apply(usage(6, now, None), limits)
    assert book.spent_day(now, limits.periods) == 0.25
    assert book.unpriced_calls["2026-12-06"] == 1
    restored = SpendBook.model_validate_json(book.model_dump_json())  # the state file round trip
    assert restored == book


def test_the_next_call_that_would_pass_the_line_is_held_and_caps_are_per_purpose() -> None:
    limits = settings(budget_daily_usd=1.0, budget_monthly_usd=30.0, budget_capsule_daily_usd=0.1).limits
    book = SpendBook()
    now = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    book.apply(usage(1, now, 0.6), limits)
    assert book.hold(now, limits, "activation") is not None  # 0.6 + the next ~0.6 > 1.0
    assert book.hold(now, limits, "task_step") is None  # no task call yet: nothing to expect
    assert book.over(now, limits) is None  # the line itself is not reached
    book.apply(usage(2, now, 0.1, purpose="capsule"), limits)
    cap = book.hold(now, limits, "capsule")
    assert cap is not None and cap.scope == "day:capsule"
    assert book.spent_month(now, limits.periods) == 0.7
    monthly = settings(budget_monthly_usd=30.0).limits
    book.apply(usage(3, now + timedelta(days=1), 29.5, purpose="owner_turn"), monthly)
    over = book.over(now + timedelta(days=1), monthly)
    assert over is not None and over.scope == "month" and over.period == "2026-12"
    assert over.until == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)  # midnight of January 1st in Berlin


def test_the_runaway_guard_trips_past_its_calls_a_minute_and_holds_for_its_pause() -> None:
    limits = settings(budget_background_calls_per_min=3, budget_runaway_pause_s=600).limits
    book = SpendBook()
    start = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)
    for n in range(3):
        book.apply(usage(n + 1, start + timedelta(seconds=n), 0.0), limits)
    book.apply(usage(10, start + timedelta(seconds=5), 0.0, purpose="owner_turn"), limits)  # not background
    assert book.runaway(start + timedelta(seconds=5), limits) is None
    book.apply(usage(11, start + timedelta(seconds=70), 0.0), limits)  # the first ones left the minute
    assert book.runaway(start + timedelta(seconds=70), limits) is None
    for n in range(3):
        book.apply(usage(20 + n, start + timedelta(seconds=71 + n), 0.0, purpose="task_step"), limits)
    hold = book.hold(start + timedelta(seconds=75), limits, "memory_extraction")
    assert hold is not None and hold.reason == "runaway" and "4 background model calls within a minute" in hold.detail
    assert hold.until == start + timedelta(seconds=73 + 600)
    assert book.hold(hold.until, limits, "activation") is None


def test_short_periods_for_demos_and_tests() -> None:
    limits = settings(budget_daily_usd=0.01, budget_period_s=60).limits
    book = SpendBook()
    at = datetime(2026, 12, 6, 10, 0, 30, tzinfo=UTC)
    book.apply(usage(1, at, 0.02), limits)
    hold = book.hold(at, limits, "activation")
    assert hold is not None and hold.until == datetime(2026, 12, 6, 10, 1, tzinfo=UTC)
    # The next period runs its first call, though the last one cost more than the whole line.
    assert book.hold(hold.until, limits, "activation") is None


def test_short_periods_count_from_their_origin_and_are_told_apart_from_another_origins() -> None:
    origin = datetime(2026, 12, 6, 10, 0, 17, tzinfo=UTC)
    limits = settings(budget_daily_usd=0.01, budget_period_s=60, budget_period_origin=origin.timestamp()).limits
    book = SpendBook()
    book.apply(usage(1, origin + timedelta(seconds=59), 0.02), limits)
    hold = book.hold(origin + timedelta(seconds=59), limits, "activation")
    # The window begins at the origin, not at a whole minute, and runs for BUDGET_PERIOD_S.
    assert hold is not None and hold.until == origin + timedelta(seconds=60)
    assert limits.periods.month_end(origin) == origin + timedelta(minutes=30)
    assert book.hold(hold.until, limits, "activation") is None
    # Window 0 of this origin is not window 0 of another: a notice told once per period key is
    # told again in a period of its own.
    later = settings(budget_period_s=60, budget_period_origin=origin.timestamp() + 1).limits.periods
    assert limits.periods.day(origin) != later.day(origin + timedelta(seconds=1))
    assert limits.periods.month(origin) != later.month(origin + timedelta(seconds=1))
    # Without an origin the windows are whole multiples of the length since the epoch, as before.
    plain = settings(budget_period_s=60).limits.periods
    assert plain.day(origin) == f"p{int(origin.timestamp() // 60)}"
    assert plain.day_end(origin) == datetime(2026, 12, 6, 10, 1, tzinfo=UTC)


def test_the_origin_changes_nothing_of_the_owners_calendar_day_and_month() -> None:
    moment = datetime(2026, 12, 6, 23, 30, tzinfo=UTC)
    calendar = settings(budget_period_origin=moment.timestamp()).limits.periods
    assert calendar.day(moment) == "2026-12-07" and calendar.month(moment) == "2026-12"
    assert calendar.day_end(moment) == datetime(2026, 12, 7, 23, 0, tzinfo=UTC)
