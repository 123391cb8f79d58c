"""End to end with real processes: the model (OpenAI stand-in) calls a local tool through the agent
and gets its result as a function_call_output continuation; voice calls the very same registry
through tools.cmd.call on the agent process."""

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, ToolCall, ToolResult
from delegate.contracts.messages import ToolListReply, ToolListRequest
from tests.agent.rig import Probe, agent_env, dump_on_failure, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .helpers import bus_call, bus_names, stdio_server, write_json

pytestmark = pytest.mark.integration


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinProcess]:
    proc = StandinProcess(log_dir=tmp_path / "standin").start()
    yield proc
    proc.stop()


@asynccontextmanager
async def running(system: System, standin: StandinProcess) -> AsyncIterator[Probe]:
    """The ledger and agent of ``system`` started, and a probe on its bus; logs kept on failure."""
    probe: Probe | None = None
    try:
        system.start("ledger", "agent")
        assert system.nats is not None
        probe = await Probe.open(system.nats.url)
        yield probe
    except BaseException:
        dump_on_failure(system, standin, Path(__file__).resolve().parents[2] / "test-output" / "tools-e2e")
        raise
    finally:
        if probe is not None:
            await probe.close()
        system.stop()


async def test_model_calls_a_local_tool_through_the_agent(tmp_path: Path, standin: StandinProcess) -> None:
    system = System(tmp_path, env=agent_env(standin))
    system.runtime.mkdir(parents=True)
    write_json(system.runtime / "mcp-servers.json", {"servers": {"kit": stdio_server()}})
    write_json(system.runtime / "agent-policies.json", {"agents": {
        "base": {"allow_tags": ["local", "mcp"]},
        "voice": {"allow_tags": ["notes"], "allow_names": ["kit__echo"]},
    }})
    async with running(system, standin) as probe:
        standin.script(
            {"action": "tool_call", "name": "notes_create", "call_id": "call_a1",
             "arguments": {"title": "Call Ana", "body": "tomorrow at 17:00"}},
            {"action": "text", "text": "Noted: call Ana tomorrow at 17:00.", "match": {"has_tool_output": True}},
        )
        said = await probe.send("Remind me to call Ana tomorrow at 5pm")
        answer = await probe.answer(said.id, timeout=60)
        assert answer.kind == "message" and answer.payload["text"] == "Noted: call Ana tomorrow at 17:00."

        first, second = response_bodies(standin)[-2:]
        offered = {t["name"]: t for t in first["tools"] if t.get("type") == "function"}
        assert {"notes_create", "memory_recall", "kit__echo"} <= set(offered)
        assert offered["notes_create"]["parameters"]["required"] == ["title"]
        outputs = [i for i in second["input"] if isinstance(i, dict) and i.get("type") == "function_call_output"]
        assert len(outputs) == 1 and outputs[0]["call_id"] == "call_a1"
        assert outputs[0]["output"].startswith("Created note ") and "Call Ana" in outputs[0]["output"]

        def tool_events() -> list[Event] | None:
            found = [e for e in probe.events if e.kind in ("tool.call", "tool.result")
                     and e.payload.get("call_id") == "call_a1"]
            return found if len(found) == 2 else None

        call, result = await probe.wait_for(tool_events, "the tool events committed")
        assert call.kind == "tool.call" and call.typed(ToolCall).name == "notes_create"
        assert result.typed(ToolResult).ok and result.parent_id == call.id
        assert call.conversation_id == answer.conversation_id and call.span_id == answer.span_id
        notes = json.loads((system.runtime / "notes.json").read_text())["notes"]
        assert [n["title"] for n in notes] == ["Call Ana"]

        # Voice reaches the same registry over the bus, under its own policy.
        assert await bus_names(probe.bus, "voice") >= {"notes_search", "kit__echo"}
        found = await bus_call(probe.bus, "notes_search", {"query": "Ana"}, agent="voice", channel="browser_voice")
        assert found.ok and "tomorrow at 17:00" in found.output
        echoed = await bus_call(probe.bus, "kit__echo", {"text": "hello from voice"}, agent="voice")
        assert echoed.ok and echoed.output == "hello from voice"
        refused = await bus_call(probe.bus, "memory_remember", {"text": "x"}, agent="voice")
        assert refused.error_code == "denied"


async def test_an_mcp_tool_openai_would_refuse_never_breaks_the_chat(tmp_path: Path, standin: StandinProcess) -> None:
    """The stand-in refuses the whole request when one tool's schema is bad, as OpenAI does; the
    agent leaves that tool out, so the chat answers, and the tool list says why it is missing."""
    system = System(tmp_path, env=agent_env(standin))
    system.runtime.mkdir(parents=True)
    server = stdio_server()
    write_json(system.runtime / "mcp-servers.json",
               {"servers": {"kit": {**server, "args": [*server["args"], "--broken-tool"]}}})
    async with running(system, standin) as probe:
        bus = probe.bus

        async def kit_listed() -> ToolListReply | None:
            reply: ToolListReply = await bus.request(topics.TOOLS_LIST, ToolListRequest())
            return reply if "kit__echo" in {t.name for t in reply.tools} else None

        listed = await eventually(kit_listed, what="the MCP server's tools listed")
        assert [(r.name, r.reason) for r in listed.refused] == [
            ("kit__tag_notes", "the array schema at properties.tags does not say what its items are")]

        standin.script({"action": "text", "text": "Hello Ana."})
        said = await probe.send("Hi, it's Ana")
        answer = await probe.answer(said.id, timeout=60)
        assert answer.kind == "message" and answer.payload["text"] == "Hello Ana."
        offered = {t.get("name") for t in response_bodies(standin)[-1]["tools"]}
        assert "kit__echo" in offered and "kit__tag_notes" not in offered

        # The owner sees it too: GET /api/tools lists the refused tool with its reason.
        system.start("gateway")
        async with httpx.AsyncClient(base_url=system.http, headers=system.auth()) as client:
            tools = (await client.get("/api/tools")).json()
        assert "kit__echo" in {t["name"] for t in tools["tools"]}
        assert tools["refused"] == [{
            "name": "kit__tag_notes", "source": "mcp:kit", "tool": "tag_notes",
            "reason": "the array schema at properties.tags does not say what its items are",
        }]
