"""Per-turn extraction waits for a pause in the conversation (issue #27), real processes: the
ledger, the memory service and the stand-in. While turns follow one another no turn is
extracted (its model call would meet the next turn's request on the same cores); once no
message was committed for MEMORY_EXTRACT_QUIET_S every turn is extracted, once; a conversation
that never pauses still has each turn extracted MEMORY_EXTRACT_MAX_DEFER_S after it was said;
a turn waiting for the pause survives a SIGKILL (it is on the index's pending list)."""

import asyncio
import time
from collections.abc import Iterator

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .builders import History
from .test_extraction import extracted_for, extraction_system, turn_calls
from .test_service import commit, indexed_through

pytestmark = [pytest.mark.integration]

QUIET_S = 2.0
MAX_DEFER_S = 6.0
# Between two turns of the chatter: well inside the quiet period, even when a commit is slow.
TURN_GAP_S = 0.25


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    yield from extraction_system(
        tmp_path_factory, request, module_standin, "memory-quiet",
        MEMORY_EXTRACT_WAIT_S="0.5", MEMORY_EXTRACT_QUIET_S=str(QUIET_S), MEMORY_EXTRACT_MAX_DEFER_S=str(MAX_DEFER_S),
    )


async def say_and_answer(bus: Bus, h: History, text: str) -> Event:
    said = h.say(text)
    h.say("Noted.", role="assistant", parent_id=said.id)
    await commit(bus, h.events[-2:])
    return said


async def extracted_once(bus: Bus, turns: list[Event]) -> list[Event]:
    """Each turn's ``memory.extracted``, once every turn has one; exactly one each."""
    ids = {t.id for t in turns}

    async def all_of_them() -> list[Event] | None:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["memory.extracted"], limit=5000))
        found = [e for e in reply.events if e.parent_id in ids]
        return found if {e.parent_id for e in found} == ids else None

    extracted = await eventually(all_of_them, f"all {len(turns)} turns extracted")
    assert sorted(e.parent_id or "" for e in extracted) == sorted(ids), "a turn extracted twice"
    return extracted


async def test_turns_in_quick_succession_are_extracted_once_the_conversation_pauses(
    bus: Bus, module_standin: StandinProcess
) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    turns = [await say_and_answer(bus, h, f"My neighbour {word} keeps goats.")]
    ends = time.monotonic() + QUIET_S * 1.5
    while time.monotonic() < ends:
        # The answered first turn would be extracted now, were it not for the turns behind it.
        assert turn_calls(module_standin, word) == [], "extracted while the conversation went on"
        await asyncio.sleep(TURN_GAP_S)  # the owner's pace: the input of this test, not a wait
        turns.append(await say_and_answer(bus, h, f"and {word} number {len(turns)} is a goat too"))
    assert turn_calls(module_standin, word) == []

    extracted = await extracted_once(bus, turns)
    assert len(turn_calls(module_standin, word)) == len(turns), "one model call per turn"
    # The pause is counted from the newest message the memory service has applied, so it is
    # measured from the turn before the last: the last one's commit (a busy ledger's fsync) may
    # itself have taken long enough to be that pause. The loop above ran 1.5 pauses long: an
    # extraction counted from any earlier turn would still fail here.
    waited = (min(e.ts for e in extracted) - turns[-2].ts).total_seconds()
    assert waited >= QUIET_S, f"the first extraction came {waited:.2f}s after the turn before the last"


async def test_a_conversation_that_never_pauses_has_each_turn_extracted_after_the_longest_deferral(
    bus: Bus, module_standin: StandinProcess
) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    first = await say_and_answer(bus, h, f"My colleague {word} plays the cello.")
    during: list[Event] = []
    ends = time.monotonic() + MAX_DEFER_S + 3.0
    while time.monotonic() < ends:
        await asyncio.sleep(TURN_GAP_S)  # the owner's pace: the input of this test, not a wait
        await say_and_answer(bus, h, f"{word} also sings")
        during = during or await extracted_for(bus, first)
    assert during, "the first turn waited for a pause that never came"
    [extracted] = during
    age = (extracted.ts - first.ts).total_seconds()
    assert age >= MAX_DEFER_S, f"extracted {age:.2f}s after it was said, before the longest deferral"
    await extracted_once(bus, [e for e in h.events if e.role == "user"])


async def test_a_turn_waiting_for_the_pause_survives_a_sigkill(
    running: System, bus: Bus, module_standin: StandinProcess
) -> None:
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    said = h.say(f"My godson {word} lives in Braga.")
    h.say("Noted.", role="assistant", parent_id=said.id)
    await indexed_through(bus, await commit(bus, h.events))
    assert turn_calls(module_standin, word) == [], "extracted before the pause"

    running.kill("memory")  # inside the quiet period: the turn is only on the index's pending list
    running.start("memory")
    await extracted_once(bus, [said])
    assert len(turn_calls(module_standin, word)) == 1
