"""A forgotten person never reappears in a model request (issue #30): real ledger, memory and
agent processes, the stand-in as the model; what the agent sent is read from the stand-in's
recorded requests."""

import json
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.people import PeopleCommand
from delegate.memory.prompts import MARK as TURN_MARK
from tests.agent.memory_rig import ON_TIME, SERVICES, agent_bodies, findable, memory_of
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

FACT = "Bea plays the cello in the Gulbenkian orchestra."


async def test_a_forgotten_person_is_in_no_later_model_request(make_system: Any, probe_for: Any, standin: Any) -> None:
    system = make_system(**ON_TIME, MEMORY_EXTRACT_WAIT_S="1").start(*SERVICES)
    probe = await probe_for(system)
    standin.script({"match": {"instructions_contains": TURN_MARK, "input_contains": "Gulbenkian orchestra"},
                    "action": "text",
                    "text": json.dumps({"items": [{"type": "fact", "text": FACT, "people": ["Bea"]}],
                                        "people": [{"name": "Bea", "relation": "friend"}]})})
    said = await probe.send("My friend Bea plays the cello in the Gulbenkian orchestra.")
    await probe.answer(said.id)

    async def known() -> Any:
        reply = await probe.bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="list"))
        return next((p for p in reply.people if p.name == "Bea" and p.facts == 1), None)

    bea = await eventually(known, "Bea with her fact")
    await findable(probe.bus, "what instrument does Bea play", "cello", purpose="turn")
    asked = await probe.send("What instrument does Bea play?")
    await probe.answer(asked.id)
    assert FACT in memory_of(agent_bodies(standin)[-1]), "retrieved before the forget"

    await probe.bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="forget", person_id=bea.id))
    after = len(standin.response_requests())
    for text in ("What instrument does Bea play again?", "Which orchestra is my friend in?"):
        turn = await probe.send(text)
        await probe.answer(turn.id)
    later = standin.response_requests()[after:]
    assert [r for r in later if str(r["body"].get("instructions", "")).startswith("You are Delegate")], "asked"
    for request in later:
        body = json.dumps(request["body"])
        assert "plays the cello" not in body and "Gulbenkian orchestra" not in body, "never given to a model again"
