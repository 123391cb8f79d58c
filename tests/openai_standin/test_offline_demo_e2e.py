"""The offline demo with the real agent, ledger and notes tool: what `make run` without a
key does with a first message and a "note that …"."""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from delegate.contracts.events import Event, ToolCall, ToolResult
from tests.agent.rig import Probe, agent_env, dump_on_failure
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = pytest.mark.integration


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinProcess]:
    proc = StandinProcess(log_dir=tmp_path / "standin").start()
    yield proc
    proc.stop()


async def test_the_demo_guides_then_takes_a_note_through_the_agent(tmp_path: Path, standin: StandinProcess) -> None:
    # The key `make run` gives the services when OPENAI_API_KEY is unset.
    system = System(tmp_path, env=agent_env(standin, OPENAI_API_KEY="offline-standin"))
    probe: Probe | None = None
    try:
        system.start("ledger", "agent")
        assert system.nats is not None
        probe = await Probe.open(system.nats.url)

        hello = await probe.send("hello")
        guide = await probe.answer(hello.id, timeout=60)
        assert guide.kind == "message" and "**Welcome to Delegate.**" in guide.payload["text"]
        assert "`OPENAI_API_KEY`" in guide.payload["text"]

        asked = await probe.send("note that my sister lives in Lisbon")
        confirmed = await probe.answer(asked.id, timeout=60)
        assert confirmed.payload["text"].startswith("Saved to your notes: **My sister lives in Lisbon**.")

        def tool_events() -> list[Event] | None:
            kinds = ("tool.call", "tool.result")
            found = [e for e in probe.events if e.kind in kinds and e.payload.get("name") == "notes_create"]
            return found if len(found) == 2 else None

        call, result = await probe.wait_for(tool_events, "the notes tool's events committed")
        assert call.typed(ToolCall).name == "notes_create" and result.typed(ToolResult).ok
        notes = json.loads((system.runtime / "notes.json").read_text())["notes"]
        assert [(n["title"], n["body"]) for n in notes] == [("My sister lives in Lisbon", "my sister lives in Lisbon")]
    except BaseException:
        dump_on_failure(system, standin, Path(__file__).resolve().parents[2] / "test-output" / "standin-demo-e2e")
        raise
    finally:
        if probe is not None:
            await probe.close()
        system.stop()
