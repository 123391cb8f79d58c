"""Inputs from the inner plane: idle checks (checkpoint + span close) and activations."""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts.messages import ActivationInput, IdleCheckInput
from tests.agent.rig import Probe, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


async def test_idle_check_writes_one_checkpoint_and_closes_the_span(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    first = await probe.send("Note that I like tea.")
    answer = await probe.answer(first.id)
    span_id, conversation_id = answer.span_id, answer.conversation_id
    in_span = await probe.ledger_events(span_id=span_id)
    last = max(e.seq or 0 for e in in_span)

    # A stale check (activity came after it) changes nothing; the current one closes the span.
    await probe.publish_input(IdleCheckInput(span_id=span_id, last_activity_seq=last - 1))
    await probe.publish_input(IdleCheckInput(span_id=span_id, last_activity_seq=last))
    await probe.wait_for(lambda: probe.of_kind("span.closed"), "the span to close")
    # The same check again (another id: a redelivery after a crash looks like this) is a no-op.
    await probe.publish_input(IdleCheckInput(span_id=span_id, last_activity_seq=last))

    second = await probe.send("And coffee in the morning.")
    await probe.answer(second.id)
    [checkpoint] = probe.of_kind("checkpoint")
    [closed] = probe.of_kind("span.closed")
    assert checkpoint.span_id == closed.span_id == span_id
    assert checkpoint.seq is not None and closed.seq is not None
    assert checkpoint.seq < closed.seq
    assert closed.payload["reason"] == "idle"
    cp = checkpoint.payload
    assert (cp["after_seq"], cp["through_seq"]) == (0, last)
    assert cp["turn_ids"] == [first.id] and cp["turn_count"] == 1
    covered = await probe.ledger_events(conversation_id=conversation_id, through_seq=last)
    assert cp["first_event_id"] == covered[0].id and cp["last_event_id"] == covered[-1].id

    # The conversation goes on in a new span.
    opened = probe.of_kind("span.opened")
    assert len(opened) == 2 and opened[1].span_id != span_id
    assert {e.conversation_id for e in probe.events} == {conversation_id}
    answered = probe.outcome(second.id)
    assert answered is not None and answered.span_id == opened[1].span_id
    state = await probe.state()
    assert state.span_id == opened[1].span_id

    # The next checkpoint starts where this one ended.
    new_last = max(e.seq or 0 for e in await probe.ledger_events(span_id=opened[1].span_id))
    await probe.publish_input(IdleCheckInput(span_id=opened[1].span_id, last_activity_seq=new_last))
    await probe.wait_for(lambda: len(probe.of_kind("checkpoint")) == 2, "the second checkpoint")
    nxt = probe.of_kind("checkpoint")[1].payload
    assert (nxt["after_seq"], nxt["through_seq"], nxt["turn_ids"]) == (last, new_last, [second.id])


async def test_an_activation_runs_in_its_own_inner_span(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    msg = await probe.send("Remind me about the dentist later.")
    answer = await probe.answer(msg.id)

    reminder = "Reminder: the dentist at three."
    standin.script({"action": "text", "text": reminder, "match": {"input_contains": "dentist"}})
    activation = ActivationInput(signals=[{"source": "timer", "type": "reminder", "data": {"text": "dentist at 3"}}])
    await probe.publish_input(activation)
    outcome = await probe.wait_for(
        lambda: next((e for e in probe.of_kind("activation.outcome") if e.parent_id == activation.id), None),
        "the activation outcome",
    )
    assert outcome.payload["status"] == "completed"
    reply = next(e for e in probe.events if e.kind == "message" and e.parent_id == activation.id)
    assert (reply.role, reply.channel, reply.payload["text"]) == ("assistant", "inner", reminder)
    await probe.wait_for(lambda: len(probe.of_kind("span.closed")) == 2, "both spans to close")
    superseded, completed = probe.of_kind("span.closed")
    assert superseded.span_id == answer.span_id and superseded.payload["reason"] == "superseded"
    assert completed.span_id == outcome.span_id == reply.span_id
    assert completed.payload["reason"] == "completed"
    activation_span = next(e for e in probe.of_kind("span.opened") if e.span_id == outcome.span_id)
    assert (activation_span.payload["type"], activation_span.channel) == ("activation", "inner")
    # No user message was invented for it; the model saw the signals as inner context.
    assert not [e for e in probe.events if e.kind == "message" and e.role == "user" and e.channel == "inner"]
    body = response_bodies(standin)[-1]
    [item] = body["input"]
    assert item["role"] == "developer" and "dentist at 3" in item["content"][0]["text"]
    assert body["previous_response_id"] == answer.payload["response_id"]
    assert "inner activity" in body["instructions"]
