"""Text chat end to end: browser WebSocket → gateway → agent → stand-in → ledger → every tab."""

from collections.abc import Callable

import pytest

from tests.agent.chat import ChatClient, api
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


async def test_messages_stream_deltas_then_persist_and_chain_with_tools(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system(COMPACT_THRESHOLD="120000").start("ledger", "agent", "gateway")
    chat = await ChatClient.open(system)
    watcher = await ChatClient.open(system)  # a second tab sees the same timeline
    try:
        standin.script({"action": "slow", "delay_ms": 20, "text": "Good morning! How can I help you today?"})
        first = await chat.send("Good morning", client_msg_id="m-1")
        answer = await chat.answer(first)
        assert answer["kind"] == "message" and answer["payload"]["text"] == "Good morning! How can I help you today?"
        assert len(chat.deltas(first)) > 1
        assert chat.streamed_text(first) == answer["payload"]["text"]
        user = next(e for e in chat.events("message") if e["id"] == first)
        assert (user["role"], user["channel"], user["payload"]["text"]) == ("user", "text", "Good morning")

        # A tool call and its continuation, inside the same chain.
        standin.script(
            {
                "action": "tool_call",
                "name": "notes_create",
                "arguments": {"title": "Groceries", "body": "milk"},
                "call_id": "call_groceries",
            },
            {"action": "text", "text": "Saved your groceries note.", "match": {"has_tool_output": True}},
        )
        second = await chat.send("Make a note: groceries, milk")
        answer2 = await chat.answer(second)
        assert answer2["payload"]["text"] == "Saved your groceries note."
        assert chat.streamed_text(second) == "Saved your groceries note."

        third = await chat.send("Thanks!")
        answer3 = await chat.answer(third)
        assert answer3["kind"] == "message"

        bodies = response_bodies(standin)
        assert len(bodies) == 4  # turn 1, turn 2 + its tool continuation, turn 3
        assert "previous_response_id" not in bodies[0]
        assert bodies[1]["previous_response_id"] == answer["payload"]["response_id"]
        assert bodies[2]["previous_response_id"] != bodies[1]["previous_response_id"]  # the tool call's response
        assert bodies[3]["previous_response_id"] == answer2["payload"]["response_id"]
        for body in bodies:
            assert body["context_management"] == [{"type": "compaction", "compact_threshold": 120000}]
            assert body["instructions"]
        [output] = bodies[2]["input"]
        assert output["type"] == "function_call_output" and output["call_id"] == "call_groceries"
        assert "Groceries" in output["output"]
        assert input_texts(bodies[3]) == ["Thanks!"]

        kinds = [e["kind"] for e in chat.events() if e["conversation_id"] == answer["conversation_id"]]
        assert kinds.count("tool.call") == 1 and kinds.count("tool.result") == 1
        assert kinds.count("context.usage") == 4

        # Every tab got every committed event once, in commit order.
        await watcher.wait_for(lambda: watcher.outcome(third), "the second tab to see the last answer")
        seqs = [e["seq"] for e in watcher.events()]
        assert seqs == sorted(set(seqs))
        assert [e["id"] for e in watcher.events()] == [e["id"] for e in chat.events()][: len(seqs)]
        assert watcher.streamed_text(first) == answer["payload"]["text"]

        async with api(system) as http:
            state = (await http.get("/api/state")).json()
        assert state["conversation_id"] == answer["conversation_id"] and state["busy"] is False
        assert state["usage"]["compact_threshold"] == 120000 and state["usage"]["input_tokens"] > 0
        assert chat.of_type("state")
    finally:
        await chat.close()
        await watcher.close()
