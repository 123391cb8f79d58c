"""The attention policy alone, on a hand-moved clock: no processes, no waiting.

Signals enter the broker's state the way the ledger hands them over (``records``), the
policy plans, and the planned decisions are recorded back as the committed events would be.
"""

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from delegate.contracts.events import Event, Imported, InnerDecision, Message, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.signals import ReminderDue, ReminderDuePayload, ScriptPayload, ScriptSignal
from delegate.inner_plane.attention import Attention, AttentionConfig, Decision, Plan
from delegate.inner_plane.budget import Budget
from delegate.inner_plane.quiet_hours import QuietHours, QuietHoursError
from delegate.inner_plane.records import record_decision, record_signal
from delegate.inner_plane.signal_event import signal_event
from delegate.inner_plane.state import BrokerState
from delegate.inner_plane.turns import observe

BERLIN = ZoneInfo("Europe/Berlin")


class ManualClock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def config(**overrides: Any) -> AttentionConfig:
    values: dict[str, Any] = {
        "quiet": None,
        "budget": Budget(100, timedelta(0), BERLIN),
        "dedup_window": timedelta(seconds=60),
        "coalesce": timedelta(seconds=2),
        "batch_max": 20,
        "turn_stale": timedelta(seconds=900),
    }
    values.update(overrides)
    return AttentionConfig(**values)


class Broker:
    """The policy plus the recording half, with the test as the ledger."""

    def __init__(self, clock: ManualClock, cfg: AttentionConfig | None = None) -> None:
        self.clock = clock
        self.cfg = cfg or config()
        self.state = BrokerState()
        self.attention = Attention(self.cfg, clock)
        self.seq = 0
        self.log: list[Decision] = []

    def take(self, signal: Any) -> str:
        self.seq += 1
        event = signal_event(signal, conversation_id=None).model_copy(update={"seq": self.seq})
        record_signal(self.state, event, self.cfg.dedup_window)
        return str(signal.id)

    def plan(self) -> Plan:
        """One look, its decisions committed at once (as the worker waits for them)."""
        plan = self.attention.plan(self.state)
        for d in plan.decisions:
            self.seq += 1
            lead = d.signal_ids[0] if d.signal_ids else None
            payload = InnerDecision(
                decision=d.decision, reason=d.reason, detail=d.detail, until=d.until,
                activation_id=f"act-{lead}" if lead else None, signal_ids=list(d.signal_ids),
            )
            event: Event = make_event(
                payload, conversation_id=None, span_id=None, channel="inner", parent_id=d.signal_id, ts=self.clock()
            ).model_copy(update={"seq": self.seq})
            record_decision(self.state, event)
        self.log.extend(plan.decisions)
        return plan

    def finish_activation(self) -> None:
        self.state.batch = None


def script(text: str = "ping", source: str = "cron", **fields: Any) -> ScriptSignal:
    return ScriptSignal(source=source, payload=ScriptPayload(text=text), **fields)


def at(text: str, zone: ZoneInfo = BERLIN) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=zone)


# ---- quiet hours ------------------------------------------------------------------------------


def test_quiet_hours_wrap_midnight_and_end_at_the_local_morning() -> None:
    quiet = QuietHours.parse("22:00-07:00", BERLIN)
    assert quiet is not None
    assert quiet.end_of(at("2026-06-10T21:59:59")) is None
    assert quiet.end_of(at("2026-06-10T22:00")) == at("2026-06-11T07:00")
    assert quiet.end_of(at("2026-06-11T03:00")) == at("2026-06-11T07:00")
    assert quiet.end_of(at("2026-06-11T07:00")) is None
    assert quiet.describe_end(at("2026-06-11T07:00")) == "quiet hours until 07:00 Europe/Berlin"
    same_day = QuietHours.parse("13:00:30-14:00", BERLIN)
    assert same_day is not None
    assert same_day.end_of(at("2026-06-10T13:00:29")) is None
    assert same_day.end_of(at("2026-06-10T13:30")) == at("2026-06-10T14:00")
    assert QuietHours.parse("  ", BERLIN) is None


def test_quiet_hours_keep_local_hours_across_both_dst_changes() -> None:
    quiet = QuietHours.parse("22:00-07:00", BERLIN)
    assert quiet is not None
    # Spring forward (29 March 2026): the night is an hour shorter, the end is still 07:00 local.
    end = quiet.end_of(at("2026-03-28T23:00"))
    assert end == datetime(2026, 3, 29, 5, 0, tzinfo=UTC)  # 07:00 CEST
    assert end - at("2026-03-28T22:00") == timedelta(hours=8)
    # Fall back (25 October 2026): an hour longer.
    end = quiet.end_of(at("2026-10-24T23:00"))
    assert end == datetime(2026, 10, 25, 6, 0, tzinfo=UTC)  # 07:00 CET
    assert end - at("2026-10-24T22:00") == timedelta(hours=10)
    # A boundary inside the skipped hour still names a real instant.
    gap = QuietHours.parse("01:00-02:30", BERLIN)
    assert gap is not None
    assert gap.end_of(datetime(2026, 3, 29, 0, 30, tzinfo=UTC)) is not None


@pytest.mark.parametrize("spec", ["22:00", "22-07", "25:00-07:00", "07:00-07:00", "late-early"])
def test_unreadable_quiet_hours_are_refused(spec: str) -> None:
    with pytest.raises(QuietHoursError):
        QuietHours.parse(spec, BERLIN)


def test_quiet_hours_hold_once_until_their_end_and_urgent_acts_at_once() -> None:
    clock = ManualClock(at("2026-06-10T23:30"))
    b = Broker(clock, config(quiet=QuietHours.parse("22:00-07:00", BERLIN)))
    calm = b.take(script("water the plants"))
    urgent = b.take(script("the server is down", urgency="urgent"))
    plan = b.plan()
    assert [(d.signal_id, d.decision, d.reason) for d in plan.decisions] == [
        (calm, "hold", "quiet_hours"), (urgent, "act", "urgent"),
    ]
    hold = plan.decisions[0]
    assert hold.until == at("2026-06-11T07:00") and hold.detail == "quiet hours until 07:00 Europe/Berlin"
    b.finish_activation()
    clock.advance(3600)
    plan = b.plan()
    assert plan.decisions == [] and plan.next_at == at("2026-06-11T07:00"), "a hold is written once"
    clock.now = at("2026-06-11T07:00")
    b.plan()  # the hold ended: ready, its coalescing window opens
    clock.advance(2)
    [act] = b.plan().decisions
    assert (act.signal_id, act.decision, act.reason) == (calm, "act", "ready")
    assert "held before: quiet_hours" in act.detail


# ---- the interruption budget ---------------------------------------------------------------------


def test_the_budget_holds_the_n_plus_first_until_the_next_local_day_and_urgent_bypasses_it() -> None:
    clock = ManualClock(at("2026-06-10T20:00"))
    b = Broker(clock, config(budget=Budget(2, timedelta(0), BERLIN), coalesce=timedelta(0)))
    for n in range(2):
        b.take(script(f"proactive {n}", source=f"s{n}"))
        [act] = b.plan().decisions
        assert act.decision == "act"
        b.finish_activation()
        clock.advance(60)
    third = b.take(script("one too many", source="s3"))
    [hold] = b.plan().decisions
    assert (hold.signal_id, hold.decision, hold.reason) == (third, "hold", "budget")
    assert hold.until == at("2026-06-11T00:00")
    assert "2 of 2 proactive activations used today" in hold.detail
    urgent = b.take(script("urgent", source="s4", urgency="urgent"))
    [act] = b.plan().decisions
    assert (act.signal_id, act.decision) == (urgent, "act")
    b.finish_activation()
    assert len(b.state.wakes) == 2, "an urgent wake does not spend the budget"
    clock.now = at("2026-06-11T00:00")
    [act] = b.plan().decisions
    assert (act.signal_id, act.decision) == (third, "act")


def test_wakes_keep_the_minimum_gap() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock, config(budget=Budget(100, timedelta(seconds=300), BERLIN), coalesce=timedelta(0)))
    b.take(script("first", source="a"))
    assert b.plan().decisions[0].decision == "act"
    b.finish_activation()
    clock.advance(100)
    second = b.take(script("second", source="b"))
    [hold] = b.plan().decisions
    assert (hold.signal_id, hold.reason, hold.until) == (second, "wake_gap", at("2026-06-10T12:05"))
    clock.now = at("2026-06-10T12:05")
    assert b.plan().decisions[0].decision == "act"


# ---- dedup, expiry, lateness -----------------------------------------------------------------------


def test_duplicates_inside_the_window_are_dropped_naming_the_first() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock, config(coalesce=timedelta(0)))
    t0 = clock.now
    first = b.take(script("a", dedup_key="k", ts=t0))
    dup = b.take(script("b", dedup_key="k", ts=t0 + timedelta(seconds=59)))
    later = b.take(script("c", dedup_key="k", ts=t0 + timedelta(seconds=61)))
    decisions = {d.signal_id: d for d in b.plan().decisions}
    assert decisions[dup].decision == "drop" and decisions[dup].reason == "duplicate"
    assert first in decisions[dup].detail
    assert decisions[first].decision == "act" and set(decisions[first].signal_ids) == {first, later}


def test_expired_signals_are_dropped_also_while_held() -> None:
    clock = ManualClock(at("2026-06-10T23:00"))
    b = Broker(clock, config(quiet=QuietHours.parse("22:00-07:00", BERLIN)))
    stale = b.take(script("too late", expires_at=clock.now - timedelta(seconds=1)))
    held = b.take(script("soon stale", expires_at=clock.now + timedelta(minutes=30)))
    plan = b.plan()
    assert [(d.signal_id, d.decision, d.reason) for d in plan.decisions] == [
        (stale, "drop", "expired"), (held, "hold", "quiet_hours"),
    ]
    assert plan.next_at is not None and plan.next_at <= clock.now + timedelta(minutes=30, seconds=1)
    clock.advance(31 * 60)
    [drop] = b.plan().decisions
    assert (drop.signal_id, drop.decision, drop.reason) == (held, "drop", "expired")
    assert not b.state.pending


def test_a_late_reminder_that_says_skip_is_dropped() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock)

    def reminder(policy: str, late_by: float) -> ReminderDue:
        payload = ReminderDuePayload(
            reminder_id="r1", text="stretch", due_at=clock.now, late_by_s=late_by, grace_s=60, late_policy=policy
        )
        return ReminderDue(source="reminders", payload=payload)

    skipped = b.take(reminder("skip", 3600))
    kept = b.take(reminder("fire", 3600))
    on_time = b.take(reminder("skip", 30))
    decisions = b.plan().decisions
    [drop] = [d for d in decisions if d.decision == "drop"]
    assert (drop.signal_id, drop.reason) == (skipped, "late") and "late by 3600 s" in drop.detail
    assert {kept, on_time} <= set(b.state.pending)


# ---- coalescing and the owner's turns ----------------------------------------------------------------


def test_a_burst_of_related_signals_becomes_one_batch_and_others_wait_their_turn() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock)
    burst = [b.take(script("mail 0", source="mail"))]
    assert b.plan().decisions == []  # the window opened
    other = b.take(script("unrelated", source="ci"))
    for n in range(1, 5):
        clock.advance(0.3)
        burst.append(b.take(script(f"mail {n}", source="mail")))
        assert b.plan().decisions == []
    clock.now = at("2026-06-10T12:00:02")
    decisions = b.plan().decisions
    assert [(d.signal_id, d.decision) for d in decisions] == [
        (burst[0], "act"), *((s, "coalesce") for s in burst[1:]),
    ]
    assert all(d.signal_ids == tuple(burst) for d in decisions)
    assert b.state.batch is not None and b.state.batch.signal_ids == burst
    assert list(b.state.pending) == [other]
    assert b.plan().decisions == [], "one activation at a time"
    b.finish_activation()
    clock.advance(1)
    [act] = b.plan().decisions  # its own window, open since it was first ready, has passed
    assert (act.signal_id, act.signal_ids) == (other, (other,))


def test_an_urgent_signal_does_not_wait_for_the_window_and_the_batch_is_capped() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock, config(batch_max=3))
    many = [b.take(script(f"n{n}", source="mail")) for n in range(4)]
    [act, *rest] = b.plan().decisions  # full: no waiting
    assert act.signal_ids == tuple(many[:3]) and len(rest) == 2
    b.finish_activation()
    urgent = b.take(script("now", source="pager", urgency="urgent"))
    [act] = b.plan().decisions
    assert (act.signal_id, act.reason) == (urgent, "urgent")


def test_mid_turn_holds_once_and_acts_when_the_turn_ends() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock, config(coalesce=timedelta(0)))
    b.state.open_turns["user-1"] = clock.now
    urgent = b.take(script("urgent too", urgency="urgent"))
    [hold] = b.plan().decisions
    assert (hold.signal_id, hold.decision, hold.reason, hold.until) == (urgent, "hold", "owner_mid_turn", None)
    assert "user-1" in hold.detail
    clock.advance(5)
    assert b.plan().decisions == [], "held once per signal, not once per look"
    del b.state.open_turns["user-1"]
    [act] = b.plan().decisions
    assert (act.signal_id, act.decision) == (urgent, "act")


def test_an_unanswered_turn_stops_counting_once_stale() -> None:
    clock = ManualClock(at("2026-06-10T12:00"))
    b = Broker(clock, config(coalesce=timedelta(0), turn_stale=timedelta(seconds=60)))
    b.state.open_turns["user-1"] = clock.now
    b.take(script("x"))
    plan = b.plan()
    assert plan.decisions[0].reason == "owner_mid_turn" and plan.next_at == at("2026-06-10T12:01")
    clock.advance(60)
    assert b.plan().decisions[0].decision == "act"


def test_an_imported_user_message_is_no_open_turn() -> None:
    state = BrokerState()
    conversation = new_id()
    imported = make_event(
        Message(text="an old question, brought in by an import", imported=Imported(import_id="imp-1")),
        conversation_id=conversation, span_id=new_id(), channel="text", role="user",
    )
    assert observe(state, imported) is False and state.open_turns == {}
    live = make_event(Message(text="a question now"), conversation_id=conversation, span_id=new_id(),
                      channel="text", role="user")
    assert observe(state, live) is True and list(state.open_turns) == [live.id]
