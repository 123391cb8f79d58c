"""Per-turn extraction stops at the owner's spend line (issue #29 item 3), real processes: the
ledger, the memory service and the stand-in. Over the extraction cap a turn waits on the
index's pending list with no model call, also across a SIGKILL; with the cap raised it is
extracted once."""

from collections.abc import Iterator

import pytest

from delegate.contracts import topics
from delegate.contracts.events import ModelUsage, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .builders import History
from .test_extraction import extracted_for, extraction_system, turn_calls
from .test_service import commit

pytestmark = [pytest.mark.integration]

HELD = "per-turn extraction waits"  # what the memory service logs when a turn waits at the line


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    yield from extraction_system(
        tmp_path_factory, request, module_standin, "memory-budget",
        MEMORY_EXTRACT_WAIT_S="0.5", BUDGET_EXTRACTION_DAILY_USD="0.001",
    )


def memory_log(system: System) -> str:
    """The log of the running memory process (each start writes a log of its own)."""
    return system.procs["memory"].log_text()


async def test_a_turn_waits_at_the_extraction_cap_and_is_extracted_once_it_is_raised(
    running: System, bus: Bus, module_standin: StandinProcess
) -> None:
    # Today's extraction spend is already past its cap (an earlier call of the inner plane's).
    spent = make_event(
        ModelUsage(model="gpt-5.5", purpose="memory_extraction", input_tokens=5000, cost_usd=0.002),
        conversation_id=None,
        span_id=None,
        channel="inner",
    )
    await commit(bus, [spent])
    word = f"Zq{new_id()[-6:]}"
    h = History(seq=False)
    turn = h.say(f"My cousin {word} lives in Faro.")
    h.say("Noted.", role="assistant", parent_id=turn.id)
    await commit(bus, h.events)

    await eventually(lambda: _true(HELD in memory_log(running)), "the turn held at the cap")
    assert turn_calls(module_standin, word) == [], "the model was called over the extraction cap"
    assert await extracted_for(bus, turn) == []

    # A SIGKILL loses nothing: the restarted service reads the spend from the ledger and waits again.
    running.kill("memory")
    running.start("memory")
    await eventually(lambda: _true(HELD in memory_log(running)), "the turn held again after the restart")
    assert turn_calls(module_standin, word) == []

    running.extra_env["BUDGET_EXTRACTION_DAILY_USD"] = "100"
    running.kill("memory")
    running.start("memory")
    [extracted] = await eventually(lambda: extracted_for(bus, turn), "the turn extracted once the cap is raised")
    assert extracted.parent_id == turn.id
    assert len(turn_calls(module_standin, word)) == 1
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["model.usage"], limit=5000))
    usage = [e for e in reply.events if e.payload.get("cause_id") == turn.id]
    assert [(e.payload["purpose"], e.channel) for e in usage] == [("memory_extraction", "text")]


async def _true(value: bool) -> bool:
    return value
