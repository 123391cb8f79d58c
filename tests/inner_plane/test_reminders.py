"""Reminders in the real inner plane: its command server, JetStream schedules, fires claimed once.

Real processes for the module: nats-server, the ledger, the inner plane and the OpenAI
stand-in (the plane's model). The test plays the agent's tools and the gateway by asking
``inner.cmd.reminders`` itself, and reads what the ledger committed. Each test uses its own
reminders, so they share the system; the kill and restart tests leave it running again.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import ReminderSpec
from delegate.runtime.bus import RemoteError
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system

from .harness import Harness, plane_env
from .reminders_rig import ask, ask_when_ready, barrier, due_at, fired, fires, set_at, soon

pytestmark = [pytest.mark.integration, pytest.mark.slow]



@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[System]:
    env = {**plane_env(module_standin), "OWNER_TIMEZONE": "Europe/Berlin", "IDLE_SPAN_SECONDS": "600"}
    with module_system(tmp_path_factory.mktemp("reminders"), request, "ledger", "inner-plane", env=env,
                       separate=("inner-plane",)) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    await harness.stand_in_for_the_agent()  # the broker's activations have a stream to go to
    yield harness
    await harness.close()


async def until(moment: datetime) -> None:
    """The scenario's own clock: let the wall clock reach ``moment``."""
    await asyncio.sleep(max((moment - utcnow()).total_seconds(), 0.0))


async def test_set_list_change_and_cancel_answer_from_the_ledger(h: Harness) -> None:
    weekly = ReminderSpec(text="bins out", rrule="FREQ=WEEKLY;BYDAY=TU;BYHOUR=19;BYMINUTE=0;BYSECOND=0")
    first = (await ask_when_ready(h.bus, op="set", spec=weekly, request_id="call-1")).reminders[0]
    assert first.status == "active" and first.revision == 1
    assert first.spec.timezone == "Europe/Berlin" and first.spec.start is not None  # filled in, then stored
    assert first.next_due is not None
    local = first.next_due.astimezone(ZoneInfo("Europe/Berlin"))
    assert (local.weekday(), local.hour, local.minute) == (1, 19, 0)  # Tuesday 19:00 in the owner's timezone
    # The same request asked again is the same reminder, stored once.
    again = (await ask(h.bus, op="set", spec=weekly, request_id="call-1")).reminders[0]
    assert again.id == first.id
    listed = (await ask(h.bus, op="list")).reminders
    assert [r.id for r in listed].count(first.id) == 1

    later = ReminderSpec(text="bins out (recycling)", cron="30 18 * * 2")
    changed = (await ask(h.bus, op="change", reminder_id=first.id, spec=later)).reminders[0]
    assert (changed.revision, changed.spec.cron, changed.spec.text) == (2, "30 18 * * 2", "bins out (recycling)")
    assert changed.next_due is not None and changed.next_due.minute == 30

    cancelled = (await ask(h.bus, op="cancel", reminder_id=first.id, reason="moved house")).reminders[0]
    assert cancelled.status == "cancelled" and cancelled.next_due is None
    assert first.id not in [r.id for r in (await ask(h.bus, op="list")).reminders]
    assert first.id in [r.id for r in (await ask(h.bus, op="list", include_done=True)).reminders]

    events = [e for e in await h.events() if e.kind.startswith("reminder.") and e.payload["reminder_id"] == first.id]
    assert [(e.kind, e.payload.get("revision")) for e in events] == [
        ("reminder.set", 1), ("reminder.changed", 2), ("reminder.cancelled", None),
    ]
    assert events[-1].payload["reason"] == "moved house" and all(e.channel == "inner" for e in events)

    refusals: list[tuple[dict[str, Any], str]] = [
        ({"op": "cancel", "reminder_id": first.id}, "conflict"),
        ({"op": "change", "reminder_id": first.id, "spec": later}, "conflict"),
        ({"op": "cancel", "reminder_id": "no-such-reminder"}, "not_found"),
        ({"op": "change", "reminder_id": "no-such-reminder", "spec": later}, "not_found"),
        ({"op": "set", "spec": ReminderSpec(text="x", rrule="FREQ=FORTNIGHTLY")}, "bad_request"),
        ({"op": "set", "spec": ReminderSpec(text="x", cron="every day")}, "bad_request"),
        ({"op": "set", "spec": ReminderSpec(text="x", at=soon(60), timezone="Atlantis/Capital")}, "bad_request"),
    ]
    for fields, code in refusals:
        with pytest.raises(RemoteError) as refused:
            await ask(h.bus, **fields)
        assert refused.value.code == code, (fields, refused.value)
        assert refused.value.message


async def test_a_reminder_fires_once_on_time(h: Harness) -> None:
    at = soon(2.0)
    reminder = await set_at(h.bus, at, text="take the cake out", urgency="urgent", late="skip", grace_s=30)
    assert reminder.next_due == at
    [fire] = await fired(h, reminder.id)
    await barrier(h)
    assert await fires(h, reminder.id) == [fire]
    assert due_at(fire) == at and fire.ts >= at  # never before its time
    signal = fire.payload["signal"]
    assert (signal["kind"], signal["urgency"], signal["source"]) == ("reminder.due", "urgent", "reminders")
    assert signal["payload"]["text"] == "take the cake out" and signal["payload"]["recurring"] is False
    assert (signal["payload"]["late_policy"], signal["payload"]["grace_s"]) == ("skip", 30)
    assert fire.span_id is None and fire.channel == "inner"
    [done] = [r for r in (await ask(h.bus, op="list", include_done=True)).reminders if r.id == reminder.id]
    assert (done.status, done.fired, done.last_fired_at, done.next_due) == ("done", 1, at, None)


async def test_a_reminder_fires_once_when_the_inner_plane_is_killed_a_second_before(
    h: Harness, running: System
) -> None:
    at = soon(3.0)
    reminder = await set_at(h.bus, at, text="call the dentist")
    await until(at - timedelta(seconds=1))
    running.kill("inner-plane")  # SIGKILL: nothing saved on the way out
    running.start("inner-plane")
    [fire] = await fired(h, reminder.id)
    await barrier(h)
    assert await fires(h, reminder.id) == [fire]
    assert due_at(fire) == at and fire.ts >= at


async def test_a_reminder_fires_once_across_a_nats_restart(h: Harness, running: System) -> None:
    assert running.nats is not None
    at = soon(3.0)
    reminder = await set_at(h.bus, at, text="water the plants")
    running.nats.stop()  # the schedule waits in the file-stored stream while the server is down
    await until(at + timedelta(seconds=1))
    running.nats.start()
    [fire] = await fired(h, reminder.id, timeout=60.0)
    await barrier(h)
    assert await fires(h, reminder.id) == [fire]
    assert due_at(fire) == at and fire.payload["signal"]["payload"]["late_by_s"] > 0


async def test_a_cancelled_reminder_never_fires_and_a_changed_one_fires_at_its_new_time_only(h: Harness) -> None:
    first_time, new_time = soon(2.0), soon(4.0)
    cancelled = await set_at(h.bus, first_time, text="cancelled")
    moved = await set_at(h.bus, first_time, text="moved")
    await ask(h.bus, op="cancel", reminder_id=cancelled.id)
    changed = (await ask(h.bus, op="change", reminder_id=moved.id, spec=ReminderSpec(text="moved", at=new_time)))
    assert changed.reminders[0].next_due == new_time
    [fire] = await fired(h, moved.id)
    await barrier(h)
    assert await fires(h, moved.id) == [fire] and due_at(fire) == new_time
    assert fire.payload["signal"]["payload"]["text"] == "moved"
    assert await fires(h, cancelled.id) == []
