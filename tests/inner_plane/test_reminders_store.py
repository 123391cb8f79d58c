"""Reminders folded from committed events: what a fire, a change and a replay do to the state.

Pure (no processes): ``store.apply`` is what the follower calls in seq order, possibly twice
for one event, and what a replay from the ledger calls for every event again.
"""

from datetime import UTC, datetime, timedelta

from delegate.contracts.events import Event, ReminderCancelled, ReminderChanged, ReminderDefined, make_event
from delegate.contracts.reminders import Reminder, ReminderFire, ReminderSpec
from delegate.inner_plane.reminders.fires import due_signal, stale
from delegate.inner_plane.reminders.recurrence import resolve
from delegate.inner_plane.reminders.store import apply
from delegate.inner_plane.signal_event import signal_event

T0 = datetime(2026, 12, 2, 9, 0, 0, 250_000, tzinfo=UTC)


def defined(reminder_id: str, revision: int, spec: ReminderSpec, moment: datetime) -> Event:
    model = ReminderDefined if revision == 1 else ReminderChanged
    body = model(reminder_id=reminder_id, revision=revision, spec=spec.model_dump(mode="json"))
    return make_event(body, conversation_id=None, span_id=None, channel="inner", ts=moment)


def fire_event(reminder: Reminder) -> Event:
    assert reminder.next_due is not None
    fire = ReminderFire(reminder_id=reminder.id, revision=reminder.revision, due_at=reminder.next_due)
    return signal_event(due_signal(reminder, fire), conversation_id=None)


def test_each_committed_fire_moves_a_recurring_reminder_on_once() -> None:
    spec = resolve(ReminderSpec(text="tick", rrule="FREQ=SECONDLY;INTERVAL=2"), default_timezone="UTC", now=T0)
    reminders: dict[str, Reminder] = {}
    assert apply(reminders, defined("r1", 1, spec, T0)) == "r1"
    first = reminders["r1"]
    assert first.next_due == T0.replace(microsecond=0) + timedelta(seconds=2)
    fire = fire_event(first)
    assert apply(reminders, fire) == "r1"
    assert apply(reminders, fire) is None  # the follower applying it again changes nothing
    moved = reminders["r1"]
    following = first.next_due + timedelta(seconds=2)
    assert (moved.fired, moved.last_fired_at, moved.next_due) == (1, first.next_due, following)


def test_a_fire_of_a_replaced_revision_is_counted_but_does_not_skip_the_new_first_occurrence() -> None:
    reminders: dict[str, Reminder] = {}
    old_spec = ReminderSpec(text="a", at=T0 + timedelta(minutes=1), timezone="UTC")
    apply(reminders, defined("r2", 1, old_spec, T0))
    claimed = fire_event(reminders["r2"])  # claimed just before the change was committed
    new_spec = ReminderSpec(text="b", at=T0 + timedelta(minutes=5), timezone="UTC")
    apply(reminders, defined("r2", 2, new_spec, T0 + timedelta(seconds=30)))
    apply(reminders, claimed)
    after = reminders["r2"]
    assert (after.revision, after.status, after.next_due, after.fired) == (2, "active", T0 + timedelta(minutes=5), 1)
    late = ReminderFire(reminder_id="r2", revision=1, due_at=T0 + timedelta(minutes=1))
    assert stale(after, late) is not None  # its schedule firing now would be dropped


def test_a_one_shot_is_done_after_its_fire_and_a_cancelled_one_drops_every_fire() -> None:
    reminders: dict[str, Reminder] = {}
    apply(reminders, defined("r3", 1, ReminderSpec(text="once", at=T0, timezone="UTC"), T0))
    pending = reminders["r3"]
    fire = ReminderFire(reminder_id="r3", revision=1, due_at=T0)
    assert stale(pending, fire) is None
    apply(reminders, fire_event(pending))
    assert (reminders["r3"].status, reminders["r3"].next_due) == ("done", None)
    assert stale(reminders["r3"], fire) == "the reminder is done"

    apply(reminders, defined("r4", 1, ReminderSpec(text="never", at=T0, timezone="UTC"), T0))
    cancel = make_event(ReminderCancelled(reminder_id="r4"), conversation_id=None, span_id=None, channel="inner")
    assert apply(reminders, cancel) == "r4" and apply(reminders, cancel) is None
    assert stale(reminders["r4"], ReminderFire(reminder_id="r4", revision=1, due_at=T0)) == "the reminder is cancelled"
    assert stale(None, fire) == "unknown reminder"


def test_the_claim_id_is_the_same_for_every_delivery_of_an_occurrence() -> None:
    reminders: dict[str, Reminder] = {}
    apply(reminders, defined("r5", 1, ReminderSpec(text="x", at=T0, timezone="UTC"), T0))
    first, second = fire_event(reminders["r5"]), fire_event(reminders["r5"])
    assert first.id == second.id and first.kind == "inner.signal"
