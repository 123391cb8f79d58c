"""The chat controls on the agent, over the real bus: Stop, Regenerate, Edit-and-resend.

Real ledger and agent processes, the real OpenAI stand-in; the probe publishes what the
gateway would (``UserInput``, ``RegenerateInput``) and sends ``agent.cmd.stop`` as it does.
"""

from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import RegenerateInput, TurnCommand
from delegate.runtime.bus import RemoteError
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]

LONG = " ".join(f"word{i}" for i in range(120)) + "."


async def stop(probe: Probe, turn_id: str) -> None:
    await probe.bus.request(topics.AGENT_STOP, TurnCommand(turn_id=turn_id))


async def regenerate(probe: Probe, turn_id: str) -> RegenerateInput:
    msg = RegenerateInput(turn_id=turn_id)
    await probe.publish_input(msg)
    return msg


def replayed(texts: list[str], text: str) -> int:
    """How often ``text`` is in the input, verbatim or as a replayed turn (behind its marker)."""
    return sum(1 for t in texts if t == text or t.endswith("] " + text))


def answers_to(probe: Probe, turn_id: str) -> list[Event]:
    return [e for e in probe.events if e.kind == "message" and e.role == "assistant" and e.parent_id == turn_id]


async def test_stop_keeps_the_partial_answer_marked_stopped_and_drops_the_stream(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script({"action": "slow", "delay_ms": 150, "text": LONG})
    question = await probe.send("Tell me a long story")
    await probe.wait_for(lambda: len(probe.turn_deltas(question.id)) >= 3, "a few deltas")
    await stop(probe, question.id)

    answer = await probe.answer(question.id)
    assert answer.kind == "message" and answer.payload["stopped"] is True
    partial = answer.payload["text"]
    assert partial and LONG.startswith(partial) and len(partial) < len(LONG)
    # What was shown is what was kept (every delta sent before the stop, and nothing after).
    assert probe.text_of_last_attempt(question.id) == partial
    # The stand-in saw the client leave: the response ended incomplete, not completed.
    response_id = answer.payload["response_id"]
    assert response_id
    await probe.wait_for(
        lambda: standin.stored(response_id)["response"]["status"] == "incomplete", "the stand-in to see the drop"
    )
    # Nothing runs any more: a second stop has nothing to stop.
    with pytest.raises(RemoteError) as refused:
        await stop(probe, question.id)
    assert refused.value.code == "nothing_to_stop"

    # The stopped turn was answered (acked), and the next turn starts fresh from the ledger,
    # which replays the partial answer: the stopped response never became the chain head.
    standin.script({"action": "text", "text": "Fine, a short one then."})
    follow = await probe.send("Shorter please")
    assert (await probe.answer(follow.id)).payload["text"] == "Fine, a short one then."
    body = response_bodies(standin)[-1]
    assert "previous_response_id" not in body
    texts = input_texts(body)
    assert replayed(texts, "Tell me a long story") == 1 and replayed(texts, partial) == 1
    assert texts[-1] == "Shorter please"
    assert len(answers_to(probe, question.id)) == 1  # never redelivered and answered again
    info = await probe.bus.js.consumer_info("AGENT", "agent-worker")
    assert info.num_ack_pending == 0


async def test_stop_while_nothing_streams_is_refused(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    with pytest.raises(RemoteError) as refused:
        await stop(probe, "no-such-turn")
    assert refused.value.code == "nothing_to_stop"


async def test_regenerate_is_a_new_attempt_from_before_the_previous_answer(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "Paris is the capital."},
        {"action": "text", "text": "First try at a poem."},
        {"action": "text", "text": "Second try at a poem."},
        {"action": "text", "text": "Third try at a poem."},
        {"action": "text", "text": "You are welcome."},
    )
    first = await probe.send("What is the capital of France?")
    a1 = await probe.answer(first.id)
    poem = await probe.send("Write me a poem")
    p1 = await probe.answer(poem.id)

    again = await regenerate(probe, poem.id)
    await probe.wait_for(lambda: len(answers_to(probe, poem.id)) == 2, "the second attempt")
    p2 = answers_to(probe, poem.id)[-1]
    assert p2.id == again.id and p2.payload["text"] == "Second try at a poem."
    assert (p2.payload["attempt"], p2.payload["regenerates"]) == (2, p1.id)
    assert p1.payload.get("attempt") is None  # the first attempt is an ordinary answer
    # The new attempt's deltas say so by their attempt number (the first one was 1).
    assert min(d.attempt for d in probe.turn_deltas(poem.id) if d.attempt > 1) == 1001

    await regenerate(probe, poem.id)
    await probe.wait_for(lambda: len(answers_to(probe, poem.id)) == 3, "the third attempt")
    p3 = answers_to(probe, poem.id)[-1]
    assert (p3.payload["attempt"], p3.payload["regenerates"]) == (3, p2.id)

    after = await probe.send("Thanks")
    await probe.answer(after.id)

    bodies = response_bodies(standin)
    assert len(bodies) == 5
    # Both new attempts continue from the answer before the poem, never from a poem answer.
    for body in bodies[2:4]:
        assert body["previous_response_id"] == a1.payload["response_id"]
        assert input_texts(body) == ["Write me a poem"]
    # The conversation goes on from the newest attempt.
    assert bodies[4]["previous_response_id"] == p3.payload["response_id"]
    # History keeps every attempt: nothing was rewritten.
    stored = [e for e in await probe.ledger_events(kinds=["message"]) if e.parent_id == poem.id]
    assert [e.payload["text"] for e in stored] == [
        "First try at a poem.",
        "Second try at a poem.",
        "Third try at a poem.",
    ]


async def test_an_edit_supersedes_the_last_question_and_the_model_never_sees_the_old_one(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "Noted."},
        {"action": "text", "text": "Answer to the typo."},
        {"action": "text", "text": "Answer to the fixed question."},
    )
    first = await probe.send("My cat is called Tom.")
    a1 = await probe.answer(first.id)
    typo = await probe.send("Wat is my cat calld?")
    await probe.answer(typo.id)

    edited = await probe.send("What is my cat called?", supersedes=typo.id)
    answer = await probe.answer(edited.id)
    assert answer.payload["text"] == "Answer to the fixed question."
    user = next(e for e in probe.events if e.id == edited.id)
    assert user.role == "user" and user.payload["supersedes"] == typo.id
    # The old question and its answer stay in history.
    assert any(e.id == typo.id for e in await probe.ledger_events(kinds=["message"]))
    body = response_bodies(standin)[-1]
    assert body["previous_response_id"] == a1.payload["response_id"]
    assert input_texts(body) == ["What is my cat called?"]


async def test_after_a_restart_regenerate_and_edit_replay_history_without_what_they_replace(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent", separate=("agent",))
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "Hello Ana."},
        {"action": "text", "text": "Old answer about tea."},
        {"action": "text", "text": "New answer about tea."},
        {"action": "text", "text": "Answer about coffee."},
    )
    first = await probe.send("I am Ana.")
    await probe.answer(first.id)
    tea = await probe.send("Tell me about tea")
    old = await probe.answer(tea.id)

    system.restart("agent")  # the chain point before the tea turn is forgotten
    await regenerate(probe, tea.id)
    await probe.wait_for(lambda: len(answers_to(probe, tea.id)) == 2, "the regenerated answer")
    body = response_bodies(standin)[-1]
    assert "previous_response_id" not in body
    texts = input_texts(body)
    assert replayed(texts, "Tell me about tea") == 1 and texts[-1] == "Tell me about tea"
    assert replayed(texts, "I am Ana.") == 1 and replayed(texts, "Hello Ana.") == 1
    assert replayed(texts, old.payload["text"]) == 0

    system.restart("agent")
    coffee = await probe.send("Tell me about coffee", supersedes=tea.id)
    await probe.answer(coffee.id)
    texts = input_texts(response_bodies(standin)[-1])
    assert texts[-1] == "Tell me about coffee" and replayed(texts, "I am Ana.") == 1
    for gone in ("Tell me about tea", "Old answer about tea.", "New answer about tea."):
        assert replayed(texts, gone) == 0, gone


async def test_compaction_figures_and_time_agree_with_usage_and_survive_restart_and_end(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    """Defect 6: the state's last_compacted_at and the compaction row come from the same events."""
    system = make_system().start("ledger", "agent", separate=("agent",))
    probe = await probe_for(system)
    question = await probe.send("Remember that my sister's birthday is on the 3rd of May.")
    await probe.answer(question.id)
    usage = probe.of_kind("context.usage")[-1]

    assert (await probe.compact()).ok
    compacted = await probe.wait_for(lambda: probe.of_kind("context.compacted"), "the compaction")
    row = compacted[-1]
    # Before: the very figure the newest usage row reported (the meter's reading).
    assert row.payload["input_tokens_before"] == usage.payload["input_tokens"]
    state = await probe.wait_for(lambda: probe.states and probe.states[-1], "a state")
    await probe.wait_for(lambda: probe.states[-1].last_compacted_at is not None, "the state to say compacted")
    state = await probe.state()
    assert state.last_compacted_at == row.ts
    assert state.usage.input_tokens == row.payload["input_tokens_after"]

    system.restart("agent")
    state = await probe.state()
    assert state.last_compacted_at == row.ts  # restored from the same event

    assert (await probe.end()).ok
    state = await probe.state()
    assert state.conversation_id is None and state.last_compacted_at is None  # a new conversation

    system.restart("agent")
    state = await probe.state()
    assert state.last_compacted_at is None  # the same after a restart
