"""Commitments end to end (issue #30): real ledger, memory, inner-plane and agent processes, the
stand-in scripted as the model.

"I'll send Ana the photos on Friday" becomes one open commitment due Friday; on Friday (the
inner plane's commitment watch run on an injected clock) a ``commitment.due`` signal goes
through the real broker and the agent nudges the owner; "done" in chat marks it kept through
the agent's ``commitment_update`` tool. One of the assistant's own commitments falling due
wakes an activation that does it.
"""

import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from delegate.contracts import topics
from delegate.contracts.events import ContactsSynced, Event, PersonImported, make_event
from delegate.contracts.ids import utcnow
from delegate.contracts.people import Commitment, CommitmentsCommand
from delegate.inner_plane.commitments import CommitmentWatch, due_signal_id
from delegate.inner_plane.context import Context
from delegate.inner_plane.model import Model
from delegate.inner_plane.settings import Settings as PlaneSettings
from delegate.inner_plane.state import StateFile
from delegate.memory.prompts import MARK as TURN_MARK
from delegate.runtime.bus import Bus
from tests.agent.memory_rig import agent_bodies
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

ZONE = "Europe/Lisbon"
SERVICES = ("ledger", "memory", "inner-plane", "agent")
ENV = {"OWNER_TIMEZONE": ZONE, "MEMORY_EXTRACT_WAIT_S": "1", "MEMORY_RESYNC_SECONDS": "1",
       "INNER_RESYNC_SECONDS": "1", "IDLE_SPAN_SECONDS": "600"}


def extraction_answers(standin: Any, word: str, answer: dict[str, Any]) -> None:
    standin.script({"match": {"instructions_contains": TURN_MARK, "input_contains": word},
                    "action": "text", "text": json.dumps(answer)})


async def open_commitments(bus: Bus, word: str, state: str = "open") -> list[Commitment]:
    cmd = CommitmentsCommand(op="list", state=state)
    reply = await bus.request(topics.MEMORY_COMMITMENTS, cmd)
    return [c for c in reply.commitments if word in c.what]


def next_friday_9(now: datetime, zone: ZoneInfo) -> datetime:
    today = now.astimezone(zone).date()
    day = today + timedelta(days=(4 - today.weekday()) % 7 or 7)
    return datetime(day.year, day.month, day.day, 9, tzinfo=zone)


async def watch_on_an_injected_clock(bus: Bus, tmp: Path, events: list[Event], now: datetime) -> CommitmentWatch:
    """The inner plane's commitment watch, in this process, fed the committed events, its clock at ``now``."""
    settings = PlaneSettings(_env_file=None, runtime_data_dir=tmp)
    ctx = Context(settings=settings, bus=bus, model=Model(settings), state_file=StateFile(tmp / "state.json"))
    watch = CommitmentWatch(ctx, clock=lambda: now)
    for event in events:
        watch.on_event(event)
    return watch


async def test_a_promise_due_friday_is_nudged_on_friday_and_kept_when_the_owner_says_done(
    make_system: Any, probe_for: Any, standin: Any, tmp_path: Path
) -> None:
    system = make_system(**ENV).start(*SERVICES)
    probe = await probe_for(system)
    zone = ZoneInfo(ZONE)
    friday = next_friday_9(utcnow(), zone)
    extraction_answers(standin, "photos on Friday", {
        "items": [{"type": "commitment", "text": "The owner will send Ana the photos on Friday."}],
        "commitments": [{"by": "owner", "what": "send Ana the photos", "to": "Ana",
                         "due": friday.strftime("%Y-%m-%d"), "due_text": "on Friday"}],
    })
    said = await probe.send("I'll send Ana the photos on Friday.")
    await probe.answer(said.id)
    [made] = await eventually(lambda: open_commitments(probe.bus, "photos"), "one open commitment")
    assert made.due == friday and made.by == "owner" and made.event_ids == [said.id]

    # Friday 09:00: the watch raises the due signal; the real broker wakes the agent, which nudges.
    standin.script({"match": {"input_contains": "The owner's commitment to Ana is due"}, "action": "text",
                    "text": "It's Friday: time to send Ana the photos."})
    events = await probe.ledger_events(kinds=["commitment.made"])
    watch = await watch_on_an_injected_clock(probe.bus, tmp_path / "plane", events, friday - timedelta(minutes=1))
    assert await watch.tick() == 0, "not before its time"
    assert await watch.tick(friday) == 1

    async def nudged() -> Event | None:
        found = await probe.ledger_events(kinds=["message"])
        return next((e for e in found if e.role == "assistant" and "send Ana the photos" in e.payload["text"]
                     and e.channel == "inner"), None)

    nudge = await eventually(nudged, "the nudge", timeout=60)
    signals = [e for e in await probe.ledger_events(kinds=["inner.signal"]) if e.id == due_signal_id(made.id)]
    assert len(signals) == 1 and signals[0].payload["signal_kind"] == "commitment.due"
    decisions = [e for e in await probe.ledger_events(kinds=["inner.decision"]) if e.parent_id == signals[0].id]
    assert decisions and decisions[0].payload["decision"] == "act", "the broker decided, and woke the agent"
    assert nudge.ts >= signals[0].ts
    await watch.tick(friday + timedelta(minutes=5))  # asked again (a restart): nothing new is committed
    assert [e.id for e in await probe.ledger_events(kinds=["commitment.due"])] == [
        e.id for e in await probe.ledger_events(kinds=["commitment.due"]) if e.payload["commitment_id"] == made.id
    ]
    assert len(await probe.ledger_events(kinds=["commitment.due"])) == 1

    # "done" in chat: the model marks it kept with the tool.
    standin.script(
        {"match": {"input_contains": "done, sent them", "has_tool": "commitment_update"}, "action": "tool_call",
         "name": "commitment_update", "arguments": {"what": "send Ana the photos", "state": "kept"},
         "call_id": "call_kept_1"},
        {"match": {"has_tool_output": True, "has_tool": "commitment_update"}, "action": "text", "text": "Great!"},
    )
    done = await probe.send("done, sent them")
    await probe.answer(done.id)
    [kept] = await eventually(lambda: open_commitments(probe.bus, "photos", "kept"), "the commitment kept")
    assert kept.id == made.id and kept.event_ids[-1] == done.id
    assert await open_commitments(probe.bus, "photos") == []
    assert any("commitment_update" in json.dumps(b.get("tools", [])) for b in agent_bodies(standin))


async def test_the_assistants_own_commitment_falling_due_is_done_by_an_activation(
    make_system: Any, probe_for: Any, standin: Any
) -> None:
    system = make_system(**ENV).start(*SERVICES)
    probe = await probe_for(system)
    soon = utcnow() + timedelta(seconds=5)
    local = soon.astimezone(ZoneInfo(ZONE))
    extraction_answers(standin, "train times", {
        "items": [],
        "commitments": [{"by": "assistant", "what": "check the train times to Porto", "due_text": "in a moment",
                         "due": local.strftime("%Y-%m-%dT%H:%M")}],
    })
    said = await probe.send("Can you check the train times to Porto in a moment?")
    await probe.answer(said.id)
    [mine] = await eventually(lambda: open_commitments(probe.bus, "train times"), "the assistant's commitment")
    assert mine.by == "assistant"

    # The real inner plane's own clock: when it falls due, the activation does the work and closes it.
    standin.script(
        {"match": {"input_contains": "Your own commitment", "has_tool": "notes_create"}, "action": "tool_call",
         "calls": [{"name": "notes_create", "arguments": {"title": "Trains to Porto", "body": "08:09, 09:39, 11:09"},
                    "call_id": "call_note_1"},
                   {"name": "commitment_update", "arguments": {"id": mine.id, "state": "kept",
                                                               "reason": "checked and noted"},
                    "call_id": "call_kept_2"}]},
        {"match": {"has_tool_output": True, "has_tool": "commitment_update"}, "action": "text",
         "text": "I checked: trains to Porto at 08:09, 09:39 and 11:09 (saved as a note)."},
    )
    [kept] = await eventually(lambda: open_commitments(probe.bus, "train times", "kept"), "kept by the activation",
                        timeout=90)
    assert kept.id == mine.id and kept.reason == "checked and noted"
    async def completed() -> list[Event]:
        return [o for o in await probe.ledger_events(kinds=["activation.outcome"])
                if o.payload["status"] == "completed"]

    await eventually(completed, "the activation's outcome")
    results = [e for e in await probe.ledger_events(kinds=["tool.result"]) if e.payload.get("name") == "notes_create"]
    assert results and results[0].payload["ok"] is True, "the activation performed it"
    [due] = await probe.ledger_events(kinds=["commitment.due"])
    assert due.payload["commitment_id"] == mine.id


async def test_a_birthday_learned_is_offered_as_a_yearly_reminder_never_set_silently(
    make_system: Any, probe_for: Any, standin: Any, tmp_path: Path
) -> None:
    system = make_system(**ENV).start(*SERVICES)
    probe = await probe_for(system)
    extraction_answers(standin, "birthday is on 14 March", {
        "items": [{"type": "fact", "text": "Ana's birthday is on 14 March.", "people": ["Ana"]}],
        "people": [{"name": "Ana", "relation": "sister", "dates": [{"label": "birthday", "date": "03-14"}]}],
    })
    standin.script({"match": {"input_contains": "Learned Ana's birthday"}, "action": "text",
                    "text": "Ana's birthday is on 14 March: shall I remind you every year?"})
    said = await probe.send("My sister Ana's birthday is on 14 March.")
    await probe.answer(said.id)

    async def offered() -> Event | None:
        found = await probe.ledger_events(kinds=["message"])
        asks = "shall I remind you every year"
        return next((e for e in found if e.role == "assistant" and asks in e.payload["text"]), None)

    await eventually(offered, "the offer of a yearly reminder", timeout=60)
    signals = [e for e in await probe.ledger_events(kinds=["inner.signal"])
               if e.payload["signal_kind"] == "person.date"]
    assert len(signals) == 1 and signals[0].payload["signal"]["payload"]["date"] == "03-14"
    assert await probe.ledger_events(kinds=["reminder.set"]) == [], "offered, never set without the owner's yes"
    # The same date learned again (a restart replaying the events) raises nothing new.
    events = await probe.ledger_events(kinds=["person.added", "person.updated", "inner.signal"])
    watch = await watch_on_an_injected_clock(probe.bus, tmp_path / "plane", events, utcnow())
    assert await watch.tick() == 0


def card(name: str, uid: str, birthday: str | None) -> Event:
    """A card as the pollers' contacts sync publishes it (tests/pollers/test_contacts.py reads Radicale)."""
    return make_event(
        PersonImported(source="http://dav.example/owner/contacts/", contact_uid=uid, name=name,
                       dates=[{"label": "birthday", "date": birthday}] if birthday else []),
        conversation_id=None, span_id=None, channel="inner",
    )


def synced(imported: int, birthdays: int) -> Event:
    return make_event(ContactsSynced(imported=imported, birthdays=birthdays), conversation_id=None, span_id=None,
                      channel="inner")


async def test_imported_birthdays_are_offered_once_together_and_set_on_the_owners_yes(
    make_system: Any, probe_for: Any, standin: Any
) -> None:
    # Two offers a few seconds apart: the default 60 s between wakes would hold the second past
    # the wait (the interruption budget has tests of its own).
    system = make_system(**ENV, INNER_MIN_WAKE_GAP_S="0").start(*SERVICES, separate=("memory", "inner-plane"))
    probe = await probe_for(system)
    standin.script({"match": {"input_contains": "address book brought 2 key date"}, "action": "text",
                    "text": "2 birthdays came in with your contacts (Ana Costa, Bruno Lima). "
                            "Shall I set yearly reminders for them: all, or the ones you name?"})
    for event in (card("Ana Costa", "ana-1", "1990-04-12"), card("Bruno Lima", "bruno-1", "07-30"),
                  card("Carla Dias", "carla-1", None), synced(3, 2)):
        await probe.append(event)

    async def asked() -> list[Event]:
        found = await probe.ledger_events(kinds=["message"])
        return [e for e in found if e.role == "assistant" and "Shall I set yearly reminders" in e.payload["text"]]

    [offer] = await eventually(asked, "one message offering the imported birthdays", timeout=60)
    [signal] = [e for e in await probe.ledger_events(kinds=["inner.signal"])
                if e.payload["signal_kind"] == "person.dates"]
    assert signal.payload["signal"]["payload"]["count"] == 2
    assert [d["name"] for d in signal.payload["signal"]["payload"]["dates"]] == ["Ana Costa", "Bruno Lima"]
    assert not [e for e in await probe.ledger_events(kinds=["inner.signal"])
                if e.payload["signal_kind"] == "person.date"], "imported dates raise no offer each"
    assert await probe.ledger_events(kinds=["reminder.set"]) == [], "offered, never set without the owner's yes"

    # the owner's yes, in a later turn: the model sets them with the reminder tool
    yearly = [("Ana Costa's birthday", "FREQ=YEARLY;BYMONTH=4;BYMONTHDAY=12;BYHOUR=9;BYMINUTE=0;BYSECOND=0"),
              ("Bruno Lima's birthday", "FREQ=YEARLY;BYMONTH=7;BYMONTHDAY=30;BYHOUR=9;BYMINUTE=0;BYSECOND=0")]
    standin.script(
        {"match": {"input_contains": "Yes, all of them", "has_tool": "set_reminder"}, "action": "tool_call",
         "calls": [{"name": "set_reminder", "arguments": {"text": text, "rrule": rule}, "call_id": f"call_bday_{n}"}
                   for n, (text, rule) in enumerate(yearly)]},
        {"match": {"has_tool_output": True, "has_tool": "set_reminder"}, "action": "text",
         "text": "Done: two yearly birthday reminders."},
    )
    yes = await probe.send("Yes, all of them.")
    await probe.answer(yes.id)
    reminders = await eventually(lambda: probe.ledger_events(kinds=["reminder.set"]), "the reminders set on the yes")
    assert sorted(r.payload["spec"]["text"] for r in reminders) == [text for text, _ in yearly]
    assert offer.ts < yes.ts

    # Across restarts, the memory index rebuilt from the ledger: Ana's card edited and Bruno's
    # imported again offer nothing; only Dan's birthday, new, is offered (alone).
    system.kill("memory")
    index = system.runtime / "memory" / "index.sqlite"
    for path in index.parent.glob(index.name + "*"):
        path.unlink()
    system.restart("memory")
    system.restart("inner-plane")
    standin.script({"match": {"input_contains": "address book brought 1 key date"}, "action": "text",
                    "text": "Dan Rocha's birthday came in with your contacts: a yearly reminder?"})
    for event in (card("Ana Costa", "ana-1", "1990-04-12"), card("Bruno Lima", "bruno-1", "07-30"),
                  card("Dan Rocha", "dan-1", "11-05"), synced(3, 3)):
        await probe.append(event)

    async def offers() -> list[Event] | None:
        found = [e for e in await probe.ledger_events(kinds=["inner.signal"])
                 if e.payload["signal_kind"] == "person.dates"]
        return found if len(found) > 1 else None

    first, second = await eventually(offers, "the offer of Dan's birthday", timeout=60)
    assert first.id == signal.id
    assert [d["name"] for d in second.payload["signal"]["payload"]["dates"]] == ["Dan Rocha"]
    await eventually(lambda: asked_dan(probe), "the one message about Dan", timeout=60)
    assert len(await asked()) == 1, "Ana and Bruno were never offered again"


async def asked_dan(probe: Any) -> list[Event]:
    found = await probe.ledger_events(kinds=["message"])
    return [e for e in found if e.role == "assistant" and "Dan Rocha's birthday" in e.payload["text"]]
