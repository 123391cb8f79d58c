"""The model request starts while a turn's opening events are still being published.

Whatever the model does, and however fast, the stream must still hold conversation.opened,
span.opened and the user message before anything else of the turn, in that order. The opening
waits for the turn's first delta, at most ``AGENT_OPENING_HOLD_MS``.
"""

import time
from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import TurnCommand
from tests.agent.rig import Probe
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


def answer_of(events: list[Event], turn_id: str) -> Event:
    [answer] = [
        e for e in events
        if e.parent_id == turn_id and (e.kind == "turn.failed" or (e.kind == "message" and e.role == "assistant"))
    ]
    return answer


async def test_a_model_failing_at_once_is_recorded_after_the_opening_events(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    # 400 is not retried by the SDK: turn.failed is ready while the opening may still be in flight.
    standin.script({"action": "error", "status": 400, "message": "nope"})
    msg = await probe.send("first words", client_msg_id="open-1")
    failed = await probe.answer(msg.id)
    assert failed.kind == "turn.failed" and failed.payload["code"] == "model_rejected"

    # Everything but the lease's own bookkeeping (term.started), which precedes any input.
    events = [e for e in await probe.ledger_events() if not e.kind.startswith("term.")]
    assert [e.kind for e in events] == ["conversation.opened", "span.opened", "message", "turn.failed"]
    opened, span, user, _ = events
    assert user.id == msg.id and user.role == "user" and user.payload["client_msg_id"] == "open-1"
    assert opened.ts < span.ts < user.ts
    assert {e.conversation_id for e in events} == {opened.conversation_id}
    assert span.span_id == user.span_id == failed.span_id
    state = await probe.state()
    assert state.conversation_id == opened.conversation_id and state.span_id == span.span_id and not state.busy


async def test_instant_answers_keep_every_turn_in_order(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    sent = [await probe.send(f"quick {i}") for i in range(12)]  # queued at once: back-to-back turns
    for msg in sent:
        await probe.answer(msg.id)

    events = [e for e in await probe.ledger_events() if not e.kind.startswith("term.")]
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["conversation.opened", "span.opened"]
    assert kinds.count("conversation.opened") == 1 and kinds.count("span.opened") == 1
    seq = {e.id: e.seq or 0 for e in events}
    for i, msg in enumerate(sent):
        turn = [e for e in events if (e.id == msg.id or e.parent_id == msg.id) and e.kind != "model.usage"]
        assert [e.kind for e in turn] == ["message", "context.usage", "message"], (i, turn)
        answer = answer_of(events, msg.id)
        assert answer.payload["response_id"] == turn[1].payload["response_id"]
        if i:  # each turn after the previous one's answer: one at a time
            assert seq[msg.id] > seq[answer_of(events, sent[i - 1].id).id]
    said = [e.payload["text"] for e in events if e.kind == "message" and e.role == "user"]
    assert said == [f"quick {i}" for i in range(12)]


STALL_S = 3.0


async def test_the_opening_waits_for_the_first_delta(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(AGENT_OPENING_HOLD_MS="60000").start("ledger", "agent")
    probe = await probe_for(system)
    committed_at: dict[str, float] = {}

    async def seen(event: Event) -> None:
        committed_at.setdefault(event.id, time.monotonic())

    await probe.bus.subscribe(topics.LEDGER_COMMITTED, seen)
    standin.script({"action": "stall", "seconds": STALL_S, "text": "There you are."})
    sent = time.monotonic()
    msg = await probe.send("held words")
    answer = await probe.answer(msg.id)
    assert answer.payload["text"] == "There you are."
    # Not committed while the model sat silent: it went out after the first delta, which the
    # stall held back (a lower bound the load can only lengthen, not a speed).
    await probe.wait_for(lambda: committed_at.get(msg.id), "the user message seen committed")
    assert committed_at[msg.id] - sent >= STALL_S
    kinds = [e.kind for e in await probe.ledger_events() if not e.kind.startswith("term.")]
    assert kinds[:3] == ["conversation.opened", "span.opened", "message"]


async def test_a_model_slow_to_start_gets_the_opening_after_the_hold(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    # The default hold; the SDK would wait a minute for the stalled model (the wait below is 30 s).
    system = make_system(OPENAI_TIMEOUT="60").start("ledger", "agent")
    probe = await probe_for(system)
    standin.script({"action": "stall"})  # silent until the client leaves
    msg = await probe.send("words for a slow model")
    await probe.wait_for(lambda: [e for e in probe.events if e.id == msg.id], "the user message committed")
    assert not probe.turn_deltas(msg.id) and probe.outcome(msg.id) is None  # the model is still silent

    await probe.bus.request(topics.AGENT_STOP, TurnCommand(turn_id=msg.id))
    stopped = await probe.answer(msg.id)
    assert stopped.payload["stopped"] is True
