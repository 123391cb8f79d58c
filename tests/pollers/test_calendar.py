"""The calendar against a real Radicale: the pollers process (ledger and nats-server real too)
keeps the projection, answers pollers.cmd.calendar, and raises calendar.* signals.

"Someone else" is the owner's other device: these tests change Radicale directly
(``Owner``), never through the pollers. Signals are read back from the INNER stream (no inner
plane runs here, so they stay there); what the ledger committed is read back from the ledger.
"""

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from delegate.contracts import streams, topics
from delegate.contracts.calendar import CalendarCommand, CalendarReply
from delegate.contracts.events import Event
from delegate.contracts.signals import SIGNAL_ADAPTER
from delegate.pollers.calendar.ical import uid_for_call
from delegate.pollers.calendar.sync import derived_id
from delegate.runtime.bus import BusUnavailable, RemoteError
from tests.inner_plane.harness import Harness
from tests.support.radicale import PASSWORD, USER, Owner, RadicaleServer, vevent
from tests.support.system import System, module_system
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

LEAD_S = 20


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    server = RadicaleServer(tmp_path_factory.mktemp("radicale")).start()
    Owner(server.direct_url).close()  # the owner's calendar exists before the pollers look
    yield server
    server.stop()


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, radicale: RadicaleServer, request: pytest.FixtureRequest
) -> Iterator[System]:
    env = {
        "CALDAV_URL": radicale.url, "CALDAV_USERNAME": USER, "CALDAV_PASSWORD": PASSWORD,
        "CALENDAR_CONFIRM_WRITES": "false", "CALENDAR_POLL_S": "0.5", "CALENDAR_UPCOMING_LEAD_S": str(LEAD_S),
        "OWNER_TIMEZONE": "UTC",
        # the morning agenda a few seconds after the start (the test after midnight would wait a day)
        "AGENDA_AT": f"{datetime.now(UTC) + timedelta(seconds=5):%H:%M:%S}",
    }
    with module_system(tmp_path_factory.mktemp("calendar"), request, "ledger", "pollers", env=env,
                       separate=("pollers",)) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    # no inner plane here: the test keeps its INNER stream, where the calendar's signals stay
    await harness.bus.ensure_streams([spec for spec in streams.STREAMS if spec.owner == "inner-plane"])
    yield harness
    await harness.close()


@pytest.fixture
def owner(radicale: RadicaleServer) -> Iterator[Owner]:
    device = radicale.owner()
    yield device
    device.close()


def _day(offset: int, hour: int, minute: int = 0) -> datetime:
    base = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return base + timedelta(days=offset, hours=hour, minutes=minute)


async def ask(h: Harness, timeout: float | None = None, **fields: Any) -> CalendarReply:
    """The command as the agent sends it, with its deadline (the contract's 30 s, not a shorter one
    of the tests' own: a write asks Radicale twice, and a loaded machine is slow to)."""
    return await h.bus.request(topics.POLLERS_CALENDAR, CalendarCommand(**fields), timeout=timeout)


async def agenda(h: Harness, start: datetime, end: datetime) -> CalendarReply:
    return await ask(h, op="agenda", start=start, end=end)


async def projected(h: Harness, uid: str, count: int, start: datetime, end: datetime) -> list[Any]:
    """Wait until the projection shows ``count`` occurrences of ``uid`` in [start, end)."""

    async def seen() -> tuple[list[Any]] | None:
        try:
            found = [e for e in (await agenda(h, start, end)).events if e.uid == uid]
        except (BusUnavailable, RemoteError):
            return None
        return (found,) if len(found) == count else None  # a tuple: none found is an answer too

    answer: tuple[list[Any]] = await eventually(seen, f"{count} occurrence(s) of {uid} in the projection", 60)
    return answer[0]


async def signals(h: Harness, kind: str) -> list[Any]:
    out = []
    for msg in await h.stream_messages("INNER"):
        signal = SIGNAL_ADAPTER.validate_json(msg.data)
        if signal.kind == kind:
            out.append(signal)
    return out


async def written_for(h: Harness, call_id: str) -> list[Event]:
    """The call's calendar.written events, once the ledger committed one: the reply comes after
    JetStream took the event, not after the ledger wrote it, so a read at once may miss it."""
    await h.committed(derived_id("calwr", call_id))
    return [e for e in await h.events(kinds=["calendar.written"]) if e.payload["call_id"] == call_id]


async def changed_events(h: Harness, uid: str) -> list[Event]:
    return [e for e in await h.events(kinds=["calendar.changed"]) if e.payload["uid"] == uid]


async def synced_after(h: Harness, owner: Owner) -> None:
    """A barrier: a change of ours on the server, and a later pass that took it in."""
    marker = owner.add(vevent("barrier", _day(40, 1), _day(40, 2)))
    await projected(h, marker, 1, _day(40, 0), _day(41, 0))
    owner.delete(marker)
    await projected(h, marker, 0, _day(40, 0), _day(41, 0))


async def test_agenda_and_free_time_across_a_recurring_event_with_an_exception(h: Harness, owner: Owner) -> None:
    first = _day(1, 9)
    moved_rid = _day(3, 9)
    extra = "\r\n".join([
        "BEGIN:VEVENT", "UID:standup-series", f"RECURRENCE-ID:{moved_rid:%Y%m%dT%H%M%SZ}",
        f"DTSTART:{_day(3, 11):%Y%m%dT%H%M%SZ}", f"DTEND:{_day(3, 11, 30):%Y%m%dT%H%M%SZ}", "SUMMARY:standup (late)",
        "END:VEVENT",
    ])
    body = vevent("standup", first, first + timedelta(minutes=30), uid="standup-series", rrule="FREQ=DAILY;COUNT=5",
                  extra=extra)
    body = body.replace("RRULE:FREQ=DAILY;COUNT=5", f"RRULE:FREQ=DAILY;COUNT=5\r\nEXDATE:{_day(4, 9):%Y%m%dT%H%M%SZ}")
    owner.add(body)

    found = await projected(h, "standup-series", 4, _day(1, 0), _day(6, 0))
    starts = [e.start for e in found]
    assert starts == [_day(1, 9), _day(2, 9), _day(3, 11), _day(5, 9)]  # day 3 moved, day 4 excepted
    moved = found[2]
    assert moved.summary == "standup (late)" and moved.recurring and moved.occurrence == moved_rid

    # day 3: the usual 09:00 is free (the occurrence moved to 11:00)
    free = await ask(h, op="free", start=_day(3, 8), end=_day(3, 12), duration_s=3600)
    assert [(s.start, s.end) for s in free.free] == [(_day(3, 8), _day(3, 11))]
    # day 2: the standup splits the morning; 30 minutes fit on both sides, an hour only before it
    free = await ask(h, op="free", start=_day(2, 8), end=_day(2, 10), duration_s=1800)
    assert [(s.start, s.end) for s in free.free] == [(_day(2, 8), _day(2, 9)), (_day(2, 9, 30), _day(2, 10))]
    free = await ask(h, op="free", start=_day(2, 8), end=_day(2, 10), duration_s=3600)
    assert [(s.start, s.end) for s in free.free] == [(_day(2, 8), _day(2, 9))]
    # day 4: nothing (excepted), the whole range is free
    free = await ask(h, op="free", start=_day(4, 8), end=_day(4, 10), duration_s=3600)
    assert [(s.start, s.end) for s in free.free] == [(_day(4, 8), _day(4, 10))]


async def test_create_is_visible_in_radicale_and_a_retried_create_makes_one_event(h: Harness, owner: Owner) -> None:
    command: dict[str, Any] = {"op": "create", "start": _day(6, 14), "end": _day(6, 15), "summary": "Dentist",
                                "location": "Main St 5", "request_id": "call_create_dentist"}
    first = await ask(h, **command)
    again = await ask(h, **command)

    uid = uid_for_call("call_create_dentist")
    assert first.status == "done" and uid in first.text
    assert again.status == "already_done"
    assert owner.uids().count(uid) == 1
    component = owner.by_uid(uid).icalendar_component
    assert str(component["SUMMARY"]) == "Dentist" and str(component["LOCATION"]) == "Main St 5"
    assert component.start == _day(6, 14)
    written = await written_for(h, "call_create_dentist")
    assert len(written) == 1 and written[0].payload["uid"] == uid
    # our own write is not "someone else's change"
    await synced_after(h, owner)
    assert await changed_events(h, uid) == []


async def test_a_create_cut_off_after_the_servers_write_is_not_made_twice_after_a_restart(
    h: Harness, owner: Owner, radicale: RadicaleServer, running: System
) -> None:
    command: dict[str, Any] = {"op": "create", "start": _day(7, 10), "end": _day(7, 11), "summary": "Haircut",
                                "request_id": "call_create_haircut"}
    uid = uid_for_call("call_create_haircut")
    radicale.held.clear()
    radicale.hold_next_put()  # Radicale stores it; the answer never reaches the pollers
    pending = asyncio.ensure_future(ask(h, timeout=60, **command))
    await eventually(lambda: asyncio.to_thread(radicale.held.is_set), "the PUT to reach Radicale")
    assert owner.uids().count(uid) == 1
    running.kill("pollers")  # SIGKILL between the server's write and the result
    running.procs["pollers"].start()
    running.wait_ready(["pollers"])

    async def retried() -> CalendarReply | None:
        try:
            return await ask(h, **command)
        except RemoteError as exc:  # "not reached yet" while the restarted pollers connect
            assert exc.code == "unavailable", exc
            return None
        except BusUnavailable:  # the restarted pollers' first sync can outlast one request on a loaded machine
            return None

    reply = await eventually(retried, "the retried create to be answered", timeout=60)
    assert reply.status == "already_done"
    # The cut-off request never got an answer: it still waits, to be told BusUnavailable at its
    # deadline (tests/runtime/test_bus_connection.py), which the test does not sit out (~60 s).
    if pending.done():
        with pytest.raises(BusUnavailable):
            pending.result()
    pending.cancel()
    assert owner.uids().count(uid) == 1
    assert sum(1 for path in radicale.puts if path.endswith(f"/{uid}.ics")) == 1  # checked, never sent again
    written = await written_for(h, "call_create_haircut")
    assert len(written) == 1


async def test_an_event_moved_by_someone_else_is_one_calendar_changed_event_and_signal(
    h: Harness, owner: Owner
) -> None:
    uid = owner.add(vevent("Lunch with Ana", _day(8, 12), _day(8, 13), location="Cafe Blau"))
    await projected(h, uid, 1, _day(8, 0), _day(9, 0))
    owner.move(uid, _day(8, 13), _day(8, 14))

    [event] = await eventually(lambda: changed_events(h, uid), "calendar.changed")
    assert event.payload["change"] == "moved"
    assert datetime.fromisoformat(event.payload["old_start"]) == _day(8, 12)
    assert datetime.fromisoformat(event.payload["new_start"]) == _day(8, 13)
    await synced_after(h, owner)
    assert len(await changed_events(h, uid)) == 1
    found = [s for s in await signals(h, "calendar.changed") if s.payload.event.uid == uid]
    assert len(found) == 1 and found[0].payload.change == "moved" and found[0].payload.event.start == _day(8, 13)

    owner.delete(uid)
    cancelled = await eventually(
        lambda: _with_change(h, uid, "cancelled"), "calendar.changed (cancelled)"
    )
    assert cancelled.payload["summary"] == "Lunch with Ana"


async def _with_change(h: Harness, uid: str, change: str) -> Event | None:
    return next((e for e in await changed_events(h, uid) if e.payload["change"] == change), None)


async def test_our_own_move_and_cancel_are_not_reported_as_changes(h: Harness, owner: Owner) -> None:
    uid = owner.add(vevent("Gym", _day(9, 7), _day(9, 8), location="Gym"))
    await projected(h, uid, 1, _day(9, 0), _day(10, 0))
    moved = await ask(h, op="move", uid=uid, start=_day(9, 18), request_id="call_move_gym")
    assert moved.status == "done"
    assert owner.by_uid(uid).icalendar_component.start == _day(9, 18)
    again = await ask(h, op="move", uid=uid, start=_day(9, 18), request_id="call_move_gym")
    assert again.status == "already_done"
    gone = await ask(h, op="cancel", uid=uid, request_id="call_cancel_gym")
    assert gone.status == "done" and uid not in owner.uids()
    await synced_after(h, owner)
    assert await changed_events(h, uid) == []


async def test_calendar_upcoming_fires_once_within_a_minute_of_its_lead_time(h: Harness, owner: Owner) -> None:
    start = (datetime.now(UTC) + timedelta(seconds=LEAD_S + 8)).replace(microsecond=0)
    uid = owner.add(vevent("Call with Bo", start, start + timedelta(minutes=30), attendees=("bo@example.com",)))

    async def raised() -> list[Any]:
        return [s for s in await signals(h, "calendar.upcoming") if s.payload.event.uid == uid]

    [signal] = await eventually(raised, "calendar.upcoming", timeout=LEAD_S + 60)
    due = start - timedelta(seconds=LEAD_S)
    assert due - timedelta(seconds=1) <= signal.ts <= due + timedelta(seconds=60)
    assert signal.payload.event.attendees == ["bo@example.com"] and signal.expires_at == start
    await synced_after(h, owner)
    assert len(await raised()) == 1


async def test_the_morning_agenda_is_raised_once_per_day_across_a_restart(
    h: Harness, owner: Owner, running: System
) -> None:
    async def agendas() -> list[Any]:
        return await signals(h, "calendar.agenda")

    [first] = await eventually(agendas, "the morning agenda", timeout=60)
    assert first.payload.day == datetime.now(UTC).date().isoformat()
    running.kill("pollers")
    running.procs["pollers"].start()
    running.wait_ready(["pollers"])
    await synced_after(h, owner)  # the restarted pollers synced (and checked their alerts) since
    await synced_after(h, owner)
    assert await agendas() == [first]
