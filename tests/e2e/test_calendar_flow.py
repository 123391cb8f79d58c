"""The calendar end to end, real processes: nats-server, ledger, agent, inner plane and pollers,
a real Radicale, the OpenAI stand-in (scripted) and the Twilio stand-in.

- An event moved in Radicale by someone else -> a calendar.changed signal -> the broker wakes
  the agent -> one SMS to the owner through the Twilio stand-in, once.
- With CALENDAR_CONFIRM_WRITES on: a create proposed in chat writes nothing, not even when the
  model tries to confirm it in the same turn; the owner's "yes" by SMS lets it confirm, and the
  event is in Radicale, once.
"""

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import UserInput
from delegate.pollers.calendar.ical import uid_for_call
from delegate.pollers.calendar.sync import derived_id
from tests.agent.rig import agent_env
from tests.inner_plane.harness import Harness, plane_env
from tests.support.radicale import PASSWORD, USER, Owner, RadicaleServer, vevent
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

OWNER_PHONE = "+15550100200"


@pytest.fixture(scope="module")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RadicaleServer]:
    server = RadicaleServer(tmp_path_factory.mktemp("radicale")).start()
    Owner(server.direct_url).close()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def twilio() -> Iterator[TwilioStandin]:
    tw = TwilioStandin().start()
    yield tw
    tw.stop()


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess, radicale: RadicaleServer,
    twilio: TwilioStandin, request: pytest.FixtureRequest,
) -> Iterator[System]:
    env = {
        **plane_env(module_standin), **agent_env(module_standin), **twilio.env(owner_phone=OWNER_PHONE),
        "OWNER_TIMEZONE": "UTC", "IDLE_SPAN_SECONDS": "600",
        "CALDAV_URL": radicale.url, "CALDAV_USERNAME": USER, "CALDAV_PASSWORD": PASSWORD,
        "CALENDAR_POLL_S": "0.5", "CALENDAR_REPLY_VIA": "sms", "CALENDAR_CONFIRM_WRITES": "true",
        "INNER_COALESCE_S": "0",
    }
    with module_system(
        tmp_path_factory.mktemp("calendar-e2e"), request, "ledger", "agent", "inner-plane", "pollers", env=env,
        extra_log=lambda: "\n===== standin\n" + module_standin.log_text()[-6000:],
    ) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    yield harness
    await harness.close()


@pytest.fixture
def owner(radicale: RadicaleServer) -> Iterator[Owner]:
    device = radicale.owner()
    yield device
    device.close()


def _day(offset: int, hour: int) -> datetime:
    return datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=offset, hours=hour)


async def _tool_result(h: Harness, call_id: str) -> dict[str, Any] | None:
    found = [e for e in await h.events(kinds=["tool.result"]) if e.payload.get("call_id") == call_id]
    return found[0].payload if found else None


async def test_an_event_moved_by_someone_else_reaches_the_owner_by_sms_once(
    h: Harness, owner: Owner, module_standin: StandinProcess, twilio: TwilioStandin
) -> None:
    module_standin.script(
        {"action": "text", "text": "Heads up: lunch with Ana moved to 13:00.",
         "match": {"input_contains": "Lunch with Ana", "has_tool": "calendar_agenda"}},
    )
    uid = owner.add(vevent("Lunch with Ana", _day(2, 12), _day(2, 13), location="Cafe Blau"))

    async def in_projection() -> bool:
        events = [e for e in await h.events(kinds=["calendar.synced"]) if e.payload["added"] >= 1]
        return bool(events)

    await eventually(in_projection, "the pollers to take in the new event", timeout=60)
    owner.move(uid, _day(2, 13), _day(2, 14))

    async def texted() -> list[str]:
        return [b for b in twilio.bodies(to=OWNER_PHONE) if "lunch with Ana moved" in b]

    await eventually(texted, "the owner's SMS", timeout=90)
    signals = [e for e in await h.events(kinds=["inner.signal"]) if e.payload["signal_kind"] == "calendar.changed"
               and e.payload["signal"]["payload"]["event"]["uid"] == uid]
    assert len(signals) == 1
    assert signals[0].payload["signal"]["payload"]["change"] == "moved"
    decided = [e for e in await h.events(kinds=["inner.decision"]) if e.parent_id == signals[0].id]
    assert [e.payload["decision"] for e in decided] == ["act"], decided

    # a later change of something else goes through the whole path too; this move is not told again
    other = owner.add(vevent("Dentist", _day(3, 9), _day(3, 10)))
    await eventually(lambda: _changed_uid(h, other, present=False), "the second event synced", timeout=60)
    assert len(await texted()) == 1
    assert len([e for e in await h.events(kinds=["calendar.changed"]) if e.payload["uid"] == uid]) == 1


async def _changed_uid(h: Harness, uid: str, *, present: bool) -> bool:
    synced = [e for e in await h.events(kinds=["calendar.synced"]) if e.payload["added"] >= 1]
    changed = [e for e in await h.events(kinds=["calendar.changed"]) if e.payload["uid"] == uid]
    return len(synced) >= 2 and bool(changed) == present


async def test_with_confirmation_on_a_write_waits_for_the_owners_yes_by_sms(
    h: Harness, owner: Owner, module_standin: StandinProcess
) -> None:
    start, end = _day(5, 15), _day(5, 16)
    proposal_id = derived_id("calprop", "call_cal_propose")
    uid = uid_for_call("call_cal_propose")
    module_standin.script(
        {"action": "tool_call", "name": "calendar_create", "call_id": "call_cal_propose",
         "arguments": {"summary": "Physio", "start": start.isoformat(), "end": end.isoformat()},
         "match": {"input_contains": "book physio", "has_tool": "calendar_create"}},
        # the model tries to confirm its own proposal at once: refused, nothing written
        {"action": "tool_call", "name": "calendar_confirm", "call_id": "call_cal_self_confirm",
         "arguments": {"proposal_id": proposal_id}, "match": {"has_tool_output": True, "has_tool": "calendar_confirm"}},
        {"action": "text", "text": "Shall I book physio on that day at 15:00?",
         "match": {"has_tool_output": True, "has_tool": "calendar_confirm"}},
    )
    said = UserInput(text="Please book physio for me", channel="text")
    await h.bus.publish(topics.AGENT_INPUT, said, msg_id=said.id)

    proposed = await eventually(lambda: _tool_result(h, "call_cal_propose"), "the proposal", timeout=60)
    assert proposed["ok"] is True and proposal_id in str(proposed["output"]), proposed
    refused = await eventually(lambda: _tool_result(h, "call_cal_self_confirm"), "the self-confirm", timeout=60)
    assert refused["ok"] is False and "not answered" in str(refused["output"]), refused
    [event] = await eventually(lambda: _kind(h, "calendar.proposed"), "calendar.proposed")
    assert event.id == proposal_id and event.payload["op"] == "create"
    assert uid not in owner.uids()

    module_standin.script(
        {"action": "tool_call", "name": "calendar_confirm", "call_id": "call_cal_confirm",
         "arguments": {"proposal_id": proposal_id}, "match": {"input_contains": "yes", "has_tool": "calendar_confirm"}},
        {"action": "text", "text": "Booked.", "match": {"has_tool_output": True, "has_tool": "calendar_confirm"}},
    )
    yes = UserInput(text="yes", channel="sms")
    await h.bus.publish(topics.AGENT_INPUT, yes, msg_id=yes.id)
    confirmed = await eventually(lambda: _tool_result(h, "call_cal_confirm"), "the confirmation", timeout=60)
    assert confirmed["ok"] is True, confirmed
    assert owner.uids().count(uid) == 1
    assert owner.by_uid(uid).icalendar_component.start == start
    [written] = await _kind(h, "calendar.written")
    assert written.payload["proposal_id"] == proposal_id and written.payload["call_id"] == "call_cal_propose"


async def _kind(h: Harness, kind: str) -> list[Event]:
    return await h.events(kinds=[kind])
