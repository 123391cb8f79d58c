"""OpenAI failures: retried where safe, otherwise a clear turn.failed; the chain never breaks."""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.events import Event
from delegate.contracts.messages import UserInput
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


async def test_failures_end_in_turn_failed_and_the_chain_stays_at_the_last_good_answer(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    # OPENAI_MAX_RETRIES=1: the SDK tries an HTTP error twice before the agent sees it.
    system = make_system(OPENAI_MAX_RETRIES="1").start("ledger", "agent")
    probe = await probe_for(system)

    async def turn(text: str) -> tuple[UserInput, Event]:
        msg = await probe.send(text)
        return msg, await probe.answer(msg.id)

    _, good = await turn("first")
    chain = good.payload["response_id"]

    # A stream that breaks after some text is sent again once, as a new attempt.
    standin.script(
        {"action": "drop_stream", "after_deltas": 2, "text": "This answer will break off half way."},
        {"action": "text", "text": "The whole answer, second time lucky."},
    )
    msg, answer = await turn("second")
    assert answer.kind == "message" and answer.payload["text"] == "The whole answer, second time lucky."
    attempts = sorted({d.attempt for d in probe.turn_deltas(msg.id)})
    assert attempts == [1, 2]
    assert probe.text_of_last_attempt(msg.id) == "The whole answer, second time lucky."
    bodies = response_bodies(standin)
    assert bodies[-1]["previous_response_id"] == bodies[-2]["previous_response_id"] == chain
    chain = answer.payload["response_id"]

    # 429 until the SDK gives up: the user sees why, the turn is over, the input acked.
    standin.script({"action": "error", "status": 429, "times": 2, "retry_after_ms": 10})
    msg, failed = await turn("third")
    assert failed.kind == "turn.failed" and failed.payload["code"] == "rate_limited"
    assert "try again" in failed.payload["message"]
    assert failed.payload["retryable"] is True

    # The next turn works and continues from the last good response, not the failed one.
    msg, answer = await turn("fourth")
    assert answer.kind == "message"
    assert response_bodies(standin)[-1]["previous_response_id"] == chain
    chain = answer.payload["response_id"]

    # A stream that keeps breaking: one retry, then turn.failed.
    standin.script({"action": "drop_stream", "after_deltas": 1, "text": "breaks again and again", "times": 2})
    msg, failed = await turn("fifth")
    assert failed.kind == "turn.failed" and failed.payload["code"] == "stream_dropped"

    # response.failed in the stream, both error-event shapes, and HTTP 500.
    standin.script({"action": "stream_error", "shape": "failed", "after_deltas": 1, "text": "oops", "times": 2})
    msg, failed = await turn("sixth")
    assert failed.kind == "turn.failed" and failed.payload["code"] == "stream_server_error"
    standin.script({"action": "stream_error", "shape": "error_wrapped", "code": "too_many_requests"})
    msg, answer = await turn("seventh")  # once only: the retry succeeds
    assert answer.kind == "message"
    standin.script({"action": "stream_error", "shape": "error", "times": 2})
    msg, failed = await turn("eighth")
    assert failed.kind == "turn.failed"
    standin.script({"action": "error", "status": 500, "times": 2})
    msg, failed = await turn("ninth")
    assert failed.kind == "turn.failed" and failed.payload["code"] == "model_unavailable"

    previous = [e for e in probe.events if e.kind == "message" and e.role == "assistant"][-1]
    msg, answer = await turn("tenth")
    assert answer.kind == "message"
    assert response_bodies(standin)[-1]["previous_response_id"] == previous.payload["response_id"]

    # Every user message is in the ledger exactly once, each answered or failed exactly once.
    users = await probe.ledger_events(kinds=["message"])
    said = [e.payload["text"] for e in users if e.role == "user"]
    assert said == ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]
    outcomes = await probe.ledger_events(kinds=["message", "turn.failed"])
    per_input = [e.parent_id for e in outcomes if e.kind == "turn.failed" or e.role == "assistant"]
    assert len(per_input) == len(set(per_input)) == 10
    state = await probe.state()
    assert not state.busy and not state.compacting


async def test_a_forgotten_chain_falls_back_to_capsule_and_recent_turns(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    for text in ("My sister is called Maria.", "She lives in Porto."):
        msg = await probe.send(text)
        assert (await probe.answer(msg.id)).kind == "message"
    standin.reset()  # the stand-in forgets every stored response, as an expired chain would be

    msg = await probe.send("Where does my sister live?")
    answer = await probe.answer(msg.id)
    assert answer.kind == "message"
    refused, fresh = response_bodies(standin)
    assert refused["previous_response_id"]
    assert "previous_response_id" not in fresh
    texts = input_texts(fresh)
    assert texts[-1] == "Where does my sister live?"
    assert any("My sister is called Maria." in t and "[text chat ·" in t for t in texts[:-1])
    assert any("She lives in Porto." in t for t in texts[:-1])
    assert sum("Where does my sister live?" in t for t in texts) == 1


async def test_a_refused_compaction_replacement_falls_back_to_capsule_and_recent_turns(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    """Compact now's output is replayed as the next turn's input; a 400 on it (the server refusing
    what its own compact endpoint returned) must not leave every later turn failing."""
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    first = await probe.send("My sister is called Maria.")
    assert (await probe.answer(first.id)).kind == "message"
    assert (await probe.compact()).ok
    await probe.wait_for(lambda: probe.of_kind("context.compacted"), "the compaction")
    standin.script(
        {
            "action": "error",
            "status": 400,
            "param": "input",
            "times": 3,
            "message": "Invalid 'input[0]': this compaction item cannot be used here.",
            "match": {"endpoint": "responses", "has_item_type": "compaction"},
        }
    )

    msg = await probe.send("What is my sister called?")
    answer = await probe.answer(msg.id)
    assert answer.kind == "message", answer.payload
    refused, fresh = response_bodies(standin)[-2:]
    assert any(item.get("type") == "compaction" for item in refused["input"])
    assert not any(item.get("type") == "compaction" for item in fresh["input"])
    assert "previous_response_id" not in fresh
    texts = input_texts(fresh)
    assert texts[-1] == "What is my sister called?"
    assert any("My sister is called Maria." in t for t in texts[:-1])

    # The next turn continues the new chain: the refused replacement is never sent again.
    later = await probe.send("Thanks!")
    assert (await probe.answer(later.id)).kind == "message"
    assert response_bodies(standin)[-1]["previous_response_id"] == answer.payload["response_id"]
    replayed = [b for b in response_bodies(standin) if any(i.get("type") == "compaction" for i in b["input"])]
    assert len(replayed) == 1
