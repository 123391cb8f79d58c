"""Background model calls are metered too (issue #29 item 1), all real processes: a chat turn
through the gateway, then the inner plane's capsule refresh and checkpoint extraction and the
memory service's per-turn extraction each write exactly one priced ``model.usage`` per call."""

from collections.abc import AsyncIterator

import httpx
import pytest

from delegate.contracts.events import Event
from delegate.runtime.pricing import Usage, load_prices
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import CAPSULE_MARK, MEMORY_MARK, Harness, model_requests, plane_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TURN_MARK = "from this single turn"  # in the memory service's per-turn instructions
MODEL = "gpt-5.5"


@pytest.fixture
async def harness(system: System, standin: StandinProcess) -> AsyncIterator[Harness]:
    system.extra_env.update(plane_env(
        standin, IDLE_SPAN_SECONDS="3", COMPACT_THRESHOLD="100000", CAPSULE_THRESHOLD="0.00001",
        MEMORY_EXTRACT_WAIT_S="0.5", OPENAI_MODEL=MODEL,
    ))
    system.start("ledger", "agent", "inner-plane", "memory", "gateway")
    h = await Harness.connect(system)
    yield h
    await h.close()


def priced(event: Event) -> float | None:
    p = event.payload
    return load_prices().cost(p["model"], Usage(p["input_tokens"], p["cached_tokens"], p["output_tokens"]))


async def test_capsule_and_extractions_each_write_one_usage_per_call(
    system: System, standin: StandinProcess, harness: Harness
) -> None:
    h = harness
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=10) as http:
        text = "Please remember: my sister Ana moved to Porto, and I promised to visit her in May."
        reply = await http.post("/api/messages", json={"text": text, "client_msg_id": "usage-1"})
        assert reply.status_code == 202, reply.text
    user = await h.committed(reply.json()["event_id"])

    async def background_usage() -> list[Event] | None:
        found = await h.events(kinds=["model.usage"])
        purposes = {e.payload["purpose"] for e in found}
        return found if {"capsule", "memory_extraction"} <= purposes and len(
            [e for e in found if e.payload["purpose"] == "memory_extraction"]) >= 2 else None

    await eventually(background_usage, "the capsule's and both extractions' usage", timeout=90)
    found = await h.events(kinds=["model.usage"])
    by_purpose: dict[str, list[Event]] = {}
    for event in found:
        by_purpose.setdefault(event.payload["purpose"], []).append(event)

    [capsule] = by_purpose["capsule"]
    assert len(model_requests(standin, CAPSULE_MARK)) == 1
    assert (capsule.channel, capsule.conversation_id, capsule.payload["cause_id"]) == (
        "inner", user.conversation_id, user.conversation_id)

    extractions = by_purpose["memory_extraction"]
    checkpoint_calls, turn_calls = model_requests(standin, MEMORY_MARK), model_requests(standin, TURN_MARK)
    assert len(checkpoint_calls) == 1 and len(turn_calls) == 1
    assert len(extractions) == len(checkpoint_calls) + len(turn_calls)
    [per_turn] = [e for e in extractions if e.payload["cause_id"] == user.id]
    assert per_turn.channel == "text" and per_turn.parent_id == user.id  # the turn's channel
    [checkpoint] = [e for e in extractions if e.payload["cause_id"] != user.id]
    assert checkpoint.channel == "inner" and checkpoint.span_id == user.span_id

    # The chat turn itself: one owner_turn per Responses call of the agent.
    assert len(by_purpose["owner_turn"]) == 1
    for event in found:
        assert event.payload["model"] == MODEL
        assert event.payload["cost_usd"] == pytest.approx(priced(event)) and event.payload["cost_usd"] > 0
