"""People and commitments for real (issue #30): the ledger, the memory service and the stand-in as
processes. The stand-in is scripted with the per-turn answers a model would give (the same
one call that nominates facts also nominates people and commitments); the memory service's
code decides who is who, links the facts, and tracks the commitments."""

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.memory import MemoryFactsCommand, MemorySearchRequest
from delegate.contracts.people import (
    Commitment,
    CommitmentsCommand,
    PeopleCommand,
    Person,
    PersonDetail,
)
from delegate.memory.prompts import MARK as TURN_MARK
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.waiting import eventually

from .builders import History
from .test_service import commit

pytestmark = [pytest.mark.integration]

ZONE = "Europe/Lisbon"


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    env = {
        "OPENAI_API_KEY": "offline-standin",
        "OPENAI_BASE_URL": module_standin.base_url,
        "MEMORY_RESYNC_SECONDS": "1",
        "MEMORY_EXTRACT_WAIT_S": "1",
        "MEMORY_RETRY_SECONDS": "0.5",
        "OWNER_TIMEZONE": ZONE,
    }
    root = tmp_path_factory.mktemp("memory-people")
    with module_system(root, request, "ledger", "memory", env=env, extra_log=module_standin.log_text) as system:
        yield system


def answers(standin: StandinProcess, word: str, answer: dict[str, Any]) -> None:
    """The per-turn extraction of the turn holding ``word`` answers ``answer`` (its JSON)."""
    standin.script({
        "match": {"instructions_contains": TURN_MARK, "input_contains": word},
        "action": "text", "text": json.dumps(answer),
    })


async def people(bus: Bus) -> list[Person]:
    return (await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="list"))).people


async def person(bus: Bus, person_id: str) -> PersonDetail:
    reply = await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="get", person_id=person_id))
    assert reply.person is not None
    return reply.person


async def commitments(bus: Bus, state: str = "all") -> list[Commitment]:
    return (await bus.request(topics.MEMORY_COMMITMENTS, CommitmentsCommand(op="list", state=state))).commitments


async def say(bus: Bus, h: History, text: str, channel: str) -> Event:
    turn = h.say(text, channel=channel)
    answer = h.say("Noted.", role="assistant", parent_id=turn.id, channel=channel)
    await commit(bus, [turn, answer])
    return turn


async def named(bus: Bus, name: str) -> list[Person]:
    return [p for p in await people(bus) if name.lower() in p.name.lower()]


async def test_one_person_across_sms_email_and_chat_with_three_cited_facts(
    bus: Bus, module_standin: StandinProcess
) -> None:
    ana = f"Ana{new_id()[-6:].lower()}"
    h = History(seq=False)
    answers(module_standin, f"{ana} Costa moved", {
        "items": [{"type": "fact", "text": f"The owner's sister {ana} Costa moved to Porto.",
                   "people": [f"{ana} Costa"]}],
        "people": [{"name": f"{ana} Costa", "aliases": [ana], "relation": "sister"}],
    })
    by_sms = await say(bus, h, f"My sister {ana} Costa moved to Porto.", "sms")
    [first] = await eventually(lambda: named(bus, ana), "the person from the SMS")
    assert first.relation == "sister" and first.aliases == [ana]

    answers(module_standin, f"{ana}'s number", {
        "items": [{"type": "fact", "text": f"{ana}'s phone number is +351 912 345 678.", "people": [ana]}],
        "people": [{"name": ana, "phones": ["+351 912 345 678"]}],
    })
    by_email = await say(bus, h, f"{ana}'s number is +351 912 345 678.", "email")
    answers(module_standin, f"{ana} loves", {
        # no names on the item: code links the fact by the name written in it
        "items": [{"type": "fact", "text": f"{ana} loves sailing."}],
        "people": [{"name": ana.upper(), "dates": [{"label": "birthday", "date": "03-14"}]}],
    })
    in_chat = await say(bus, h, f"{ana} loves sailing, her birthday is 14 March.", "text")

    async def three_facts() -> PersonDetail | None:
        found = await named(bus, ana)
        detail = await person(bus, found[0].id) if len(found) == 1 else None
        return detail if detail is not None and len(detail.linked_facts) == 3 and detail.dates else None

    detail = await eventually(three_facts, "one person with three linked facts")
    assert len(await named(bus, ana)) == 1, "one person, not three"
    assert detail.name == f"{ana} Costa" and detail.phones == ["+351 912 345 678"]
    assert [(d.label, d.date) for d in detail.dates] == [("birthday", "03-14")]
    cited = sorted(tuple(f.event_ids) for f in detail.linked_facts)
    assert cited == sorted([(by_sms.id,), (by_email.id,), (in_chat.id,)]), "each fact cites its own turn"
    assert {m.channel for m in detail.recent_mentions} == {"sms", "email", "text"}
    assert detail.mentions == 3 and detail.facts == 3
    # the next birthday is its next occurrence in the owner's zone
    [birthday] = detail.dates
    assert birthday.next is not None and (birthday.next.month, birthday.next.day) == (3, 14)
    assert birthday.next.utcoffset() is not None


async def test_a_forgotten_person_never_reappears_in_retrieval_or_a_model_request(
    bus: Bus, module_standin: StandinProcess
) -> None:
    bea = f"Bea{new_id()[-6:].lower()}"
    h = History(seq=False)
    answers(module_standin, f"{bea} plays", {
        "items": [{"type": "fact", "text": f"{bea} plays the cello in an orchestra.", "people": [bea]}],
        "people": [{"name": bea, "relation": "friend", "emails": [f"{bea}@example.org"]}],
    })
    said = await say(bus, h, f"My friend {bea} plays the cello in an orchestra.", "text")
    [found] = await eventually(lambda: named(bus, bea), "the person")
    await eventually(lambda: _linked(bus, found.id), "the fact linked")
    search = MemorySearchRequest(query=f"{bea} cello", purpose="turn")
    assert (await bus.request(topics.MEMORY_SEARCH, search)).results, "found before the forget"

    reply = await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="forget", person_id=found.id, reason="owner"))
    assert reply.event_id is not None
    assert await named(bus, bea) == []
    facts = (await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list"))).facts
    [fact] = [f for f in facts if bea in f.text]
    assert fact.status == "forgotten" and fact.event_ids == [said.id], "history kept, the fact out of use"
    assert (await bus.request(topics.MEMORY_SEARCH, search)).results == []

    # Mentioned again: the model's request for that turn shows none of what was forgotten, and
    # nothing it nominates about her is stored; the new turn itself stays out of retrieval too.
    answers(module_standin, f"{bea} called", {
        "items": [{"type": "fact", "text": f"{bea} plays the cello and called today.", "people": [bea]}],
        "people": [{"name": bea, "emails": [f"{bea}@example.org"]}],
    })
    again = await say(bus, h, f"{bea} called me today about the cello.", "text")

    async def extracted() -> list[dict[str, Any]] | None:
        calls = [r for r in module_standin.response_requests()
                 if TURN_MARK in str(r["body"].get("instructions", "")) and f"{bea} called" in str(r["body"]["input"])]
        return calls or None

    [call] = await eventually(extracted, "the second turn's extraction call")
    assert "orchestra" not in call["body"]["input"], "the forgotten fact is not among the known facts"
    await eventually(lambda: _turn_done(bus, again), "the second turn reconciled")
    assert await named(bus, bea) == []
    facts = (await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list"))).facts
    assert [f.text for f in facts if bea in f.text and f.status == "active"] == []
    assert (await bus.request(topics.MEMORY_SEARCH, MemorySearchRequest(query=bea, purpose="turn"))).results == []
    owner = await bus.request(topics.MEMORY_SEARCH, MemorySearchRequest(query=f"{bea} called", purpose="owner"))
    assert any(r.id == again.id for r in owner.results), "the owner's own search still finds the turn (history kept)"


async def _linked(bus: Bus, person_id: str) -> PersonDetail | None:
    detail = await person(bus, person_id)
    return detail if detail.linked_facts else None


async def _turn_done(bus: Bus, turn: Event) -> bool:
    from delegate.contracts.messages import QueryRequest

    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["memory.extracted"], limit=5000))
    return any(turn.id in (e.payload.get("turn_ids") or []) for e in reply.events) and not (
        await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list"))
    ).error


def next_friday(now: datetime, zone: ZoneInfo) -> datetime:
    today = now.astimezone(zone).date()
    day = today + timedelta(days=(4 - today.weekday()) % 7 or 7)
    return datetime(day.year, day.month, day.day, 9, tzinfo=zone)


async def test_a_promise_is_one_open_commitment_due_friday_until_kept(
    bus: Bus, module_standin: StandinProcess
) -> None:
    zone = ZoneInfo(ZONE)
    word = f"photos{new_id()[-6:].lower()}"
    friday = next_friday(utcnow(), zone)
    promise = {"by": "owner", "what": f"send Ana the {word}", "to": "Ana", "due_text": "on Friday"}
    h = History(seq=False)
    answers(module_standin, f"the {word} on Friday", {
        "items": [{"type": "commitment", "text": f"The owner will send Ana the {word} on Friday."}],
        "commitments": [{**promise, "due": friday.strftime("%Y-%m-%d")}],
    })
    made_in = await say(bus, h, f"I'll send Ana the {word} on Friday.", "text")
    # said again, with no date the model could read: the words are read forward, and it is one commitment
    answers(module_standin, f"{word} again", {"items": [], "commitments": [{**promise, "due": None}]})
    await say(bus, h, f"Remember, the {word} again.", "sms")

    async def one_open() -> list[Commitment] | None:
        found = [c for c in await commitments(bus, "open") if word in c.what]
        return found or None

    [open_one] = await eventually(one_open, "the open commitment")
    await eventually(lambda: _turn_done(bus, made_in), "both turns read")
    assert [c.id for c in await commitments(bus, "open") if word in c.what] == [open_one.id]
    assert open_one.by == "owner" and open_one.to == "Ana" and open_one.state == "open"
    assert open_one.due == friday and open_one.due_text == "on Friday"
    assert open_one.event_ids == [made_in.id]

    done = CommitmentsCommand(op="update", what=f"sent Ana the {word}", new_state="kept", reason="the owner said done",
                              request_id=f"kept-{word}")
    reply = await bus.request(topics.MEMORY_COMMITMENTS, done)
    assert reply.commitment is not None and reply.commitment.state == "kept" and reply.event_id
    again = await bus.request(topics.MEMORY_COMMITMENTS, done)
    assert again.commitment is not None and again.commitment.closed_at == reply.commitment.closed_at
    assert [c.id for c in await commitments(bus, "kept") if word in c.what] == [open_one.id]
    assert [c for c in await commitments(bus, "open") if word in c.what] == []
