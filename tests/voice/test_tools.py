"""A function call in a call runs through the agent's tool registry under the voice policy."""

from collections.abc import Callable
from typing import Any

from delegate.contracts.voice import TranscriptOut
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import events_until


async def test_tool_call_through_the_registry(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("agent", "voice")
    bus, caller = await connect(system)
    tool_call = {"name": "notes_create", "arguments": {"title": "Buy milk"}}
    standin.realtime_script({"transcript": "note that I need milk", "tool_call": tool_call})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    answer = await eventually(
        lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer after the tool"
    )
    assert "notes_create" in answer[0].text
    await caller.hang_up()

    sessions = standin.realtime_sessions()
    update = next(e["session"] for s in sessions for e in s["events"] if e.get("type") == "session.update")
    assert "notes_create" in [t["name"] for t in update["tools"]]  # the voice policy allows it
    client_events = [e for s in sessions for e in s["events"]]
    outputs = [e for e in client_events if e.get("type") == "conversation.item.create"
               and e["item"]["type"] == "function_call_output"]
    assert len(outputs) == 1 and "Buy milk" in outputs[0]["item"]["output"]
    assert client_events.index(outputs[0]) < max(
        i for i, e in enumerate(client_events) if e.get("type") == "response.create"
    )

    events = await events_until(bus, caller.session_id, "span.closed")
    call = next(e for e in events if e.kind == "tool.call")
    result = next(e for e in events if e.kind == "tool.result")
    assert call.payload["name"] == "notes_create" and call.payload["agent"] == "voice" and call.channel == "phone"
    assert call.payload["arguments"] == {"title": "Buy milk"}
    assert result.payload["ok"] is True and result.parent_id == call.id
    said = [(e.role, e.payload["text"]) for e in events if e.kind == "message"]
    assert said[0] == ("user", "note that I need milk") and said[-1][0] == "assistant"
    assert "notes_create" in said[-1][1]
