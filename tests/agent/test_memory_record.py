"""A turn's ``memory.retrieved`` is committed once, also when the agent dies in the middle of it.

The record of a search that answered in time goes out after the turn's first delta (off the way
to it), under an id fixed by the turn. Killed before the first delta, the agent committed none;
killed after it, the turn answered again commits the same id, which the ledger keeps once.
"""

import json
from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import Event
from tests.agent.memory_rig import AGENT_MARK, ON_TIME, SERVICES, agent_bodies
from tests.agent.rig import Probe
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

QUESTION = "When does the parcel from Lisbon arrive?"
SAID = "It arrives on Friday."


def records(probe: Probe, turn_id: str) -> list[Event]:
    return [e for e in probe.of_kind("memory.retrieved") if e.parent_id == turn_id]


@pytest.mark.parametrize("after_deltas", [0, 1], ids=["before-the-first-delta", "after-the-first-delta"])
async def test_a_turn_killed_mid_answer_records_its_memory_once(
    after_deltas: int,
    make_system: Callable[..., System],
    probe_for: Callable[[System], Awaitable[Probe]],
    standin: StandinProcess,
) -> None:
    system = make_system(AGENT_ACK_WAIT="2", **ON_TIME).start(*SERVICES, separate=("agent",))
    probe = await probe_for(system)
    turn_request = {"input_contains": "parcel from Lisbon", "instructions_contains": AGENT_MARK}  # not extraction's
    standin.script(
        {"action": "stall", "after_deltas": after_deltas, "match": turn_request},
        {"action": "text", "text": SAID, "match": turn_request},
    )
    turn = await probe.send(QUESTION)

    def asked() -> int:
        return len([b for b in agent_bodies(standin) if "parcel from Lisbon" in json.dumps(b["input"])])

    await eventually(asked, "the turn's model request")
    if after_deltas:
        await probe.wait_for(lambda: probe.turn_deltas(turn.id), "the first delta")
        await probe.wait_for(lambda: records(probe, turn.id), "the record, out after the first delta")
    system.kill("agent")  # SIGKILL with the model request open
    system.procs["agent"].start()

    answer = await probe.answer(turn.id, timeout=60)
    assert answer.payload["text"] == SAID
    assert asked() == 2
    committed = await probe.ledger_events(kinds=["memory.retrieved"])
    assert [e.parent_id for e in committed].count(turn.id) == 1
