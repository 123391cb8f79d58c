"""End to end with real processes: the model (OpenAI stand-in) calls a local tool through the agent
and gets its result as a function_call_output continuation; voice calls the very same registry
through tools.cmd.call on the agent process."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.contracts.events import Event, ToolCall, ToolResult
from tests.agent.rig import Probe, agent_env, dump_on_failure, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

from .helpers import bus_call, bus_names, stdio_server, write_json

pytestmark = pytest.mark.integration


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinProcess]:
    proc = StandinProcess(log_dir=tmp_path / "standin").start()
    yield proc
    proc.stop()


async def test_model_calls_a_local_tool_through_the_agent(tmp_path: Path, standin: StandinProcess) -> None:
    system = System(tmp_path, env=agent_env(standin))
    system.runtime.mkdir(parents=True)
    write_json(system.runtime / "mcp-servers.json", {"servers": {"kit": stdio_server()}})
    write_json(system.runtime / "agent-policies.json", {"agents": {
        "base": {"allow_tags": ["local", "mcp"]},
        "voice": {"allow_tags": ["notes"], "allow_names": ["kit__echo"]},
    }})
    probe: Probe | None = None
    try:
        system.start("ledger", "agent")
        assert system.nats is not None
        probe = await Probe.open(system.nats.url)
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
    except BaseException:
        dump_on_failure(system, standin, Path(__file__).resolve().parents[2] / "test-output" / "tools-e2e")
        raise
    finally:
        if probe is not None:
            await probe.close()
        system.stop()
