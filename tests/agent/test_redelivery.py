"""A leader that died after answering but before acking: the next leader must not answer again."""

from collections.abc import Awaitable, Callable
from typing import TypedDict

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from delegate.contracts import streams, subjects, topics
from delegate.contracts.events import Channel, ConversationOpened, Message, SpanOpened, make_event
from delegate.contracts.messages import UserInput
from tests.agent.rig import Probe
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]


class Place(TypedDict):
    """Where a seeded event goes (make_event's keywords the events share)."""

    conversation_id: str
    channel: Channel


async def test_a_redelivered_input_that_was_answered_is_acked_not_rerun(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(AGENT_ACK_WAIT="2").start("ledger")
    probe: Probe = await probe_for(system)

    # Play the dead leader: take the input, record the whole turn, never ack.
    msg = UserInput(text="answered just before the crash")
    await probe.publish_input(msg)
    config = ConsumerConfig(
        durable_name=streams.AGENT_WORKER,
        ack_wait=2.0,
        max_deliver=30,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=subjects.AGENT_INPUT,
        max_ack_pending=1000,
    )
    psub = await probe.bus.js.pull_subscribe(
        subjects.AGENT_INPUT, durable=streams.AGENT_WORKER, stream="AGENT", config=config
    )
    [taken] = await psub.fetch(1, timeout=5)
    assert topics.AGENT_INPUT.decode(taken.data).id == msg.id
    conversation, span = "conv-dead-leader", "span-dead-leader"
    common: Place = {"conversation_id": conversation, "channel": "text"}
    await probe.append(make_event(ConversationOpened(), span_id=None, **common))
    await probe.append(make_event(SpanOpened(type="interaction"), span_id=span, **common))
    await probe.append(make_event(Message(text=msg.text), span_id=span, role="user", id=msg.id, ts=msg.ts, **common))
    await probe.append(
        make_event(
            Message(text="the answer", response_id="resp_dead"),
            span_id=span,
            role="assistant",
            parent_id=msg.id,
            **common,
        )
    )
    await psub.unsubscribe()

    # The new leader gets the input again (after ack_wait) and finds the answer in the ledger.
    system.start_one("agent")
    system.wait_ready(["agent"])
    follow = await probe.send("and the next one")
    answer = await probe.answer(follow.id)
    assert answer.kind == "message"
    assert (answer.conversation_id, answer.span_id) == (conversation, span)  # resumed, nothing opened twice

    # Wait until JetStream has redelivered the old input and the agent acked it.
    async def settled() -> bool:
        info = await probe.bus.js.consumer_info("AGENT", streams.AGENT_WORKER)
        # Three deliveries: the dead leader's, the redelivery, the follow-up; all acked.
        delivered = info.delivered.consumer_seq if info.delivered else 0
        return (delivered or 0) >= 3 and info.num_ack_pending == 0 and info.num_pending == 0

    await eventually(settled, "the old input redelivered and acked")
    ledger = await probe.ledger_events()
    assert [e.kind for e in ledger].count("conversation.opened") == 1
    assert [e.kind for e in ledger].count("span.opened") == 1
    assert len([e for e in ledger if e.parent_id == msg.id]) == 1
    assert [e.id for e in ledger if e.id == msg.id] == [msg.id]
    # Only the follow-up reached the model; the answered input was not run again.
    bodies = [r["body"] for r in standin.response_requests()]
    assert bodies and all(msg.text not in str(b["input"]) or "[text chat ·" in str(b["input"]) for b in bodies)
    assert all("and the next one" in str(b["input"]) for b in bodies)


async def test_an_input_handed_out_again_as_new_is_answered_once(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    """A nats-server SIGKILLed after the answer can forget both the ack and the delivery count
    (JetStream writes consumer state lazily), so the input comes back as a *first* delivery.
    Here it is put on the stream again past the dedup window's message id, which the agent sees
    the same way: to the process that answered it, and to a restarted one that never saw it."""
    system = make_system().start("ledger", "agent", separate=("agent",))
    probe: Probe = await probe_for(system)
    msg = await probe.send("what did we decide about the roof?")
    first = await probe.answer(msg.id)
    assert first.kind == "message"

    async def handed_out_again(times: int) -> None:
        await probe.bus.publish(topics.AGENT_INPUT, msg, msg_id=f"{msg.id}:again-{times}")
        # A later input is answered only once the repeated one was dealt with (inputs go in order).
        follow = await probe.send(f"and after repeat {times}?")
        await probe.answer(follow.id)

    await handed_out_again(1)  # the same process: it remembers settling the input
    system.procs["agent"].stop()
    system.procs["agent"].start()
    system.wait_ready(["agent"])
    await handed_out_again(2)  # a new process: the answer's id is the input's own, stored once

    answers = [e for e in await probe.ledger_events(kinds=["message", "turn.failed"]) if e.parent_id == msg.id]
    assert [(e.kind, e.role, e.id) for e in answers] == [("message", "assistant", first.id)]
    assert len([e for e in await probe.ledger_events(kinds=["message"]) if e.id == msg.id]) == 1
    # The process that answered it did not ask the model again.
    asked = [b for b in (r["body"] for r in standin.response_requests()) if msg.text in str(b["input"])]
    assert len(asked) <= 2, len(asked)  # the first answer, the new process's; not the old one's repeat
