"""Per-turn extraction for real: the ledger, the memory service and the stand-in as processes.

The test plays the chat: it commits user messages and answers through the ledger, and the
memory service extracts each turn with one model call (the stand-in's offline demo reads
what was stated), then reconciles: a repeat is a citation, a correction retires the fact it
names, a checkpoint's restatement adds nothing.
"""

from collections.abc import Iterator
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, MemoryExtracted
from delegate.contracts.ids import new_id
from delegate.contracts.memory import MemoryFact, MemoryFactsCommand
from delegate.contracts.messages import QueryRequest
from delegate.memory.prompts import MARK as TURN_MARK
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.waiting import eventually

from .builders import History
from .test_service import commit, indexed_through

pytestmark = [pytest.mark.integration]

OFFLINE_KEY = "offline-standin"  # the key the stand-in answers as the offline demo (reads stated facts)


def extraction_system(
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
    standin: StandinProcess,
    name: str,
    **env: str,
) -> Iterator[System]:
    """The ledger and memory, extracting through the stand-in; ``env`` on top of the quick waits."""
    env = {
        "OPENAI_API_KEY": OFFLINE_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "MEMORY_RESYNC_SECONDS": "1",
        "MEMORY_EXTRACT_WAIT_S": "1",
        "MEMORY_RETRY_SECONDS": "0.5",
        **env,
    }
    root = tmp_path_factory.mktemp(name)
    # memory in a process of its own: the budget module kills it and reads its log.
    with module_system(root, request, "ledger", "memory", env=env, separate=("memory",),
                       extra_log=standin.log_text) as system:
        yield system


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    yield from extraction_system(tmp_path_factory, request, module_standin, "memory-extraction")


async def facts_about(bus: Bus, word: str) -> list[MemoryFact]:
    reply = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list", include_retired=True))
    return [f for f in reply.facts if word in f.text]


def turn_calls(standin: StandinProcess, word: str) -> list[dict[str, Any]]:
    return [
        r for r in standin.response_requests()
        if TURN_MARK in str(r["body"].get("instructions", "")) and word in str(r["body"].get("input", ""))
    ]


async def extracted_for(bus: Bus, turn: Event) -> list[Event]:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["memory.extracted"], limit=5000))
    return [e for e in reply.events if turn.id in (e.payload.get("turn_ids") or [])]


async def test_the_same_fact_stated_in_two_turns_is_one_fact_citing_both(
    bus: Bus, module_standin: StandinProcess
) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    first = h.say(f"My brother {word} lives in Lisbon. What should I cook tonight?")
    h.say("Maybe soup.", role="assistant", parent_id=first.id)
    second = h.say(f"my brother {word} lives in lisbon")
    h.say("Noted.", role="assistant", parent_id=second.id)
    await commit(bus, h.events)

    async def cited_twice() -> list[MemoryFact] | None:
        found = await facts_about(bus, word)
        return found if found and len(found[0].event_ids) >= 2 else None

    [fact] = await eventually(cited_twice, "one fact citing both turns")
    assert fact.text == f"My brother {word} lives in Lisbon."
    assert fact.status == "active" and fact.origin == "turn"
    assert abs((fact.valid_at - first.ts).total_seconds()) < 0.001, "true since it was said"
    assert fact.event_ids == [first.id, second.id]
    assert [c.kind for c in fact.history] == ["memory.fact.cited", "memory.fact.added"]  # newest first

    # One model call per turn, each shown the turn (with its answer) and the stored facts.
    calls = turn_calls(module_standin, word)
    assert len(calls) == 2
    assert "Maybe soup." in calls[0]["body"]["input"] and "KNOWN FACTS" in calls[0]["body"]["input"]
    assert f"- {fact.id}: {fact.text}" in calls[1]["body"]["input"], "the second call saw the first fact"
    for call in calls:
        assert call["body"].get("store") is False and "previous_response_id" not in call["body"]
    # Each turn's nominations were written once, attached to its span, citing the turn.
    [one] = await extracted_for(bus, first)
    assert one.payload["checkpoint_id"] is None and one.parent_id == first.id and one.span_id == h.span_id
    assert one.payload["items"][0]["text"] == fact.text


async def test_a_correction_supersedes_the_fact_it_names(bus: Bus, module_standin: StandinProcess) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    said = h.say(f"My sister {word} lives in Lisbon.")
    h.say("Lovely city.", role="assistant", parent_id=said.id)
    await commit(bus, h.events)
    [old] = await eventually(lambda: facts_about(bus, word), "the first fact")

    fixed = h.say(f"Actually my sister {word} moved to Porto.")
    h.say("Noted, Porto.", role="assistant", parent_id=fixed.id)
    await commit(bus, h.events[-2:])

    async def superseded() -> list[MemoryFact] | None:
        found = {f.id: f for f in await facts_about(bus, word)}
        return list(found.values()) if found.get(old.id) and found[old.id].status == "superseded" else None

    found = {f.id: f for f in await eventually(superseded, "the old fact superseded")}
    [new] = [f for f in found.values() if f.id != old.id]
    assert new.text == f"My sister {word} moved to Porto." and new.status == "active"
    assert new.supersedes == [old.id] and new.event_ids[0] == fixed.id
    assert abs((new.valid_at - fixed.ts).total_seconds()) < 0.001
    retired = found[old.id]
    assert retired.invalid_at == new.valid_at and retired.superseded_by == new.id
    assert retired.event_ids == [said.id], "the old fact keeps its own sources"
    # The model only nominated: it was shown the old fact's id, and named it.
    [call] = [c for c in turn_calls(module_standin, word) if "Porto" in c["body"]["input"]]
    assert old.id in call["body"]["input"]
    [nominated] = await extracted_for(bus, fixed)
    assert nominated.payload["items"][0]["contradicts"] == [old.id]


async def test_an_unanswered_turn_is_extracted_after_the_wait_and_adaptations_are_typed(
    bus: Bus, module_standin: StandinProcess
) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    said = h.say(f"Please call me {word}. Keep answers short.")  # no answer ever comes
    await commit(bus, h.events)

    async def both() -> list[MemoryFact] | None:
        found = await facts_about(bus, word) + [f for f in await facts_about(bus, "answers short")]
        return found if len(found) >= 2 else None

    found = await eventually(both, "the adaptations")
    assert {f.type for f in found} == {"adaptation"}
    assert all(said.id in f.event_ids for f in found)
    [call] = turn_calls(module_standin, word)
    assert "assistant:" not in call["body"]["input"].split("TURN:")[1]


async def test_a_checkpoint_restating_turn_facts_adds_only_what_is_new(bus: Bus) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    said = h.say(f"My aunt {word} keeps bees.")
    answer = h.say("Sweet.", role="assistant", parent_id=said.id)
    last = await commit(bus, h.events)
    [fact] = await eventually(lambda: facts_about(bus, word), "the turn's fact")

    items = [
        {"kind": "fact", "text": f"my aunt {word} keeps bees"},  # what the turn's extraction stored
        {"kind": "preference", "text": f"The owner likes honey from aunt {word}."},  # new at the checkpoint
        {"kind": "note", "text": "free text the model wrote"},
    ]
    checkpoint = MemoryExtracted(
        checkpoint_id=new_id(), items=items, summary=f"Talked about aunt {word}'s bees.",
        after_seq=0, through_seq=last, turn_ids=[said.id, answer.id],
    )
    h.add(checkpoint, channel="inner")
    await commit(bus, h.events[-1:])

    async def two() -> list[MemoryFact] | None:
        found = await facts_about(bus, word)
        return found if len(found) >= 2 else None

    found = {f.text: f for f in await eventually(two, "the checkpoint's new fact")}
    assert set(found) == {fact.text, f"The owner likes honey from aunt {word}."}
    honey = found[f"The owner likes honey from aunt {word}."]
    assert (honey.origin, honey.type, honey.event_ids) == ("checkpoint", "preference", [said.id])
    kept = found[fact.text]
    assert kept.event_ids == [said.id], "a restatement citing nothing new writes nothing"
    assert "free text the model wrote" not in found, "a free-text note is not a fact"


async def test_an_extraction_applied_but_not_reconciled_is_reconciled_after_a_restart(
    system: System, module_standin: StandinProcess
) -> None:
    """The index moved past a memory.extracted whose facts were never written (the service died
    in between, or extraction was off): the restarted extractor still reconciles it."""
    system.extra_env.update({
        "OPENAI_API_KEY": OFFLINE_KEY, "OPENAI_BASE_URL": module_standin.base_url,
        "MEMORY_RESYNC_SECONDS": "1", "MEMORY_EXTRACTION": "false",
    })
    system.start("ledger", "memory", separate=("memory",))
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test-probe")
    try:
        h = History(seq=False)
        said = h.say("My kayak is stored at the Olhão boatyard.")
        h.add(MemoryExtracted(turn_ids=[said.id], items=[
            {"type": "fact", "text": "My kayak is stored at the Olhão boatyard.", "subject": "kayak"}]),
            channel="inner", parent_id=said.id)
        await indexed_through(bus, await commit(bus, h.events))
        assert await facts_about(bus, "kayak") == []  # applied to the index, nothing reconciled

        # The same index, a new process with extraction on (restart() would keep the old env).
        system.procs["memory"].stop()
        system.extra_env["MEMORY_EXTRACTION"] = "true"
        system.start_one("memory")
        system.wait_ready(["memory"])

        async def kayak() -> list[MemoryFact] | None:
            return await facts_about(bus, "kayak") or None

        [fact] = await eventually(kayak, "the left-over extraction to be reconciled")
        assert fact.event_ids == [said.id] and fact.status == "active"
        assert turn_calls(module_standin, "Olhão") == []  # reconciled from the record, no new model call
    finally:
        await bus.close()
