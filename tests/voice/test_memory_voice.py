"""Memory and voice: a Realtime session is seeded with memory, and what was said in a call is
retrieved in a later text turn. Real ledger, memory, agent and voice processes; the stand-in
speaks Realtime and Responses."""

from collections.abc import Callable
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import ConversationOpened, Event, Message, Role, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import UserInput
from delegate.contracts.voice import TranscriptOut
from tests.agent.memory_rig import agent_bodies, findable, memory_of, remember, section
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import events_until, ledger_events, session_updates

MEMORY = {"MEMORY_RETRIEVAL_WAIT_MS": "5000", "AGENT_RECENT_TURNS": "0"}


async def _answer(bus: Any, turn_id: str, timeout: float = 40.0) -> Event:
    async def answers() -> list[Event]:
        return [e for e in await ledger_events(bus, kinds=["message", "turn.failed"]) if e.parent_id == turn_id]

    return (await eventually(answers, f"the answer to {turn_id}", timeout, interval=0.1))[0]


async def test_a_fact_said_in_a_call_is_retrieved_in_a_later_text_turn(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("memory", "agent", "voice", fresh=True, **MEMORY)
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "my brother Tom lives in Oslo now", "answer": "Good to know."})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer")
    await caller.hang_up()
    events = await events_until(bus, caller.session_id, "span.closed")
    assert ("user", "my brother Tom lives in Oslo now") in [(e.role, e.payload.get("text")) for e in events
                                                           if e.kind == "message"]
    await findable(bus, "where does my brother live", "Oslo")

    question = UserInput(text="Where does my brother live?", channel="text")
    await bus.publish(topics.AGENT_INPUT, question, msg_id=question.id)
    assert (await _answer(bus, question.id)).kind == "message"
    assert "Oslo" in memory_of(agent_bodies(standin)[-1])


async def test_a_call_is_seeded_with_memory_and_records_it(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("memory", "voice", fresh=True, **MEMORY)
    bus, caller = await connect(system)
    conversation = new_id()
    seeds: tuple[tuple[ConversationOpened | Message, Role | None], ...] = (
        (ConversationOpened(), None),
        (Message(text="Let's plan the garden this weekend."), "user"),
    )
    for payload, role in seeds:
        event = make_event(payload, conversation_id=conversation, span_id=None, channel="text", role=role)
        await bus.publish(topics.ledger_append("test"), event, msg_id=event.id)
    await remember(bus, "Speak slowly and call me Sam.", "adaptation")
    await remember(bus, "The owner grows tomatoes and beans in the garden.")
    await findable(bus, "plan the garden", "tomatoes", purpose="voice")

    assert (await caller.prepare("phone")).ok
    update = (await eventually(lambda: session_updates(standin), "the session.update"))[0]
    instructions = update["instructions"]
    assert "Speak slowly and call me Sam." in section(instructions, "## How the owner wants to be answered")
    assert "tomatoes and beans" in section(instructions, "## Memory")
    assert "Let's plan the garden this weekend." not in section(instructions, "## Memory")  # verbatim already
    assert (await caller.attach()).ok
    await caller.hang_up()
    events = await events_until(bus, caller.session_id, "span.closed")
    records = [e for e in events if e.kind == "memory.retrieved"]
    assert len(records) == 1 and records[0].channel == "phone"
    retrieved = records[0].payload
    assert retrieved["purpose"] == "voice" and "plan the garden" in retrieved["query"]
    assert retrieved["late"] is False and retrieved["surfaced"] is True
    assert {i["text"] for i in retrieved["items"]} >= {"Speak slowly and call me Sam.",
                                                      "The owner grows tomatoes and beans in the garden."}
