"""Every model call of the agent writes one ``model.usage``: turns, tool rounds, web search, compaction,
activations, on the channel of their cause and priced from the shipped table (real ledger, agent
and stand-in)."""

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from delegate.contracts.events import Event
from delegate.runtime.pricing import Usage, load_prices
from tests.agent.activations import activation, reminder
from tests.agent.rig import Probe, response_bodies
from tests.agent.test_channel_replies import sms_input
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]

MODEL = "gpt-5.5"  # the agent's default model, priced in the shipped table


def usage_events(probe: Probe) -> list[Event]:
    return probe.of_kind("model.usage")


def expected_cost(payload: dict[str, Any]) -> float | None:
    return load_prices().cost(payload["model"], Usage(
        input_tokens=payload["input_tokens"], cached_tokens=payload["cached_tokens"],
        output_tokens=payload["output_tokens"], audio_input_tokens=payload["audio_input_tokens"],
        audio_output_tokens=payload["audio_output_tokens"], web_search_calls=payload["web_search_calls"],
    ))


async def usage_count(probe: Probe, n: int, what: str) -> list[Event]:
    await probe.wait_for(lambda: len(usage_events(probe)) >= n, what)
    return usage_events(probe)


async def test_each_model_call_writes_one_priced_usage_event(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(COMPACT_THRESHOLD="50000", OPENAI_MODEL=MODEL).start("ledger", "agent")
    probe = await probe_for(system)

    # A chat turn that searches the web: two Responses calls of the turn, one of the search.
    standin.script(
        {
            "action": "tool_call",
            "name": "web_search",
            "arguments": {"query": "museum Sunday hours"},
            "call_id": "call_ws_1",
            "match": {"input_contains": "Look it up"},
        },
        {
            "action": "web_search",
            "text": "It opens at 10:00 on Sundays.",
            "match": {"input_contains": "Sunday hours"},
            "results": [{"url": "https://museum.example.org/hours", "title": "Hours"}],
        },
        {"action": "text", "text": "It opens at ten.", "match": {"has_tool_output": True}},
    )
    chat = await probe.send("Look it up: when does the museum open?")
    await probe.answer(chat.id)
    calls = len(response_bodies(standin))
    assert calls == 3
    events = await usage_count(probe, calls, "a usage event per model call of the chat turn")
    by_purpose = sorted(e.payload["purpose"] for e in events)
    assert by_purpose == ["owner_turn", "owner_turn", "web_search"], events
    turn_events = [e for e in events if e.payload["purpose"] == "owner_turn"]
    assert {(e.channel, e.payload["cause_id"], e.parent_id) for e in turn_events} == {("text", chat.id, chat.id)}
    response_ids = {e.payload["response_id"] for e in turn_events}
    assert len(response_ids) == 2  # one per Responses call, not one per turn
    [search] = [e for e in events if e.payload["purpose"] == "web_search"]
    assert search.payload["web_search_calls"] == 1 and search.payload["cause_id"] == "call_ws_1"
    assert search.channel == "text" and search.span_id == chat_span(probe, chat.id)
    for event in events:
        assert event.payload["model"] == MODEL and event.payload["input_tokens"] > 0
        assert event.payload["cost_usd"] is not None and event.payload["cost_usd"] > 0
        assert event.payload["cost_usd"] == pytest.approx(expected_cost(event.payload))
    # The search's cost includes its call fee: a cent at the shipped table's price.
    assert search.payload["cost_usd"] > 0.01

    # An SMS turn: its usage is on the sms channel.
    sms = sms_input("Are we still on for lunch?", "SM" + "3" * 32)
    await probe.publish_input(sms)
    await probe.answer(sms.id)
    events = await usage_count(probe, 4, "the SMS turn's usage")
    [sms_usage] = [e for e in events if e.payload["cause_id"] == sms.id]
    assert (sms_usage.channel, sms_usage.payload["purpose"]) == ("sms", "owner_turn")

    # Compact now: the compaction endpoint's call.
    reply = await probe.compact()
    assert reply.ok, reply
    events = await usage_count(probe, 5, "the compaction's usage")
    [compaction] = [e for e in events if e.payload["purpose"] == "compaction"]
    assert compaction.payload["cost_usd"] == pytest.approx(expected_cost(compaction.payload))
    assert compaction.payload["input_tokens"] > 0

    # An activation: billed to the activation.
    act = activation(reminder("Water the plants"))
    standin.script({"action": "text", "text": "Time to water the plants.", "match": {"input_contains": "Water the"}})
    await probe.publish_input(act)
    events = await usage_count(probe, 6, "the activation's usage")
    [activated] = [e for e in events if e.payload["purpose"] == "activation"]
    assert activated.channel == "inner" and activated.payload["cause_id"] == act.id
    assert len(usage_events(probe)) == len(response_bodies(standin)) + 1  # + the compaction call

    # Exactly one per call, also as the ledger keeps them.
    stored = await probe.ledger_events(kinds=["model.usage"])
    assert sorted(e.id for e in stored) == sorted(e.id for e in usage_events(probe))


def chat_span(probe: Probe, turn_id: str) -> str | None:
    return next(e.span_id for e in probe.events if e.id == turn_id)


async def test_a_call_that_failed_after_billing_is_recorded_too(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(OPENAI_MODEL=MODEL).start("ledger", "agent")
    probe = await probe_for(system)
    # The first attempt fails mid-answer (response.failed, with its usage); the retry answers.
    standin.script(
        {"action": "stream_error", "after_deltas": 1, "shape": "failed", "text": "half of an answer here"},
        {"action": "text", "text": "The whole answer."},
    )
    msg = await probe.send("Tell me something.")
    answer = await probe.answer(msg.id)
    assert answer.payload["text"] == "The whole answer."
    events = await usage_count(probe, 2, "both attempts' usage")
    assert [e.payload.get("failed") for e in events] == [True, None]
    assert all(e.payload["cause_id"] == msg.id and e.payload["cost_usd"] > 0 for e in events)
