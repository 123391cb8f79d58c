"""Voice tests: real nats-server, ledger and voice processes (the agent where tools are needed),
the real OpenAI stand-in speaking Realtime; the test plays the gateway's side over the bus."""

import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate.runtime.bus import Bus
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System
from tests.voice.peer import Caller

ROOT = Path(__file__).resolve().parents[2]

# No greeting: the first answer is the one to the caller's first turn.
QUIET = {"name": "quiet", "voice": "marin", "style": "Be brief.", "default": True,
         "vad": {"type": "server_vad", "threshold": 0.5, "silence_duration_ms": 400}}


def voice_env(standin: StandinProcess, **extra: str) -> dict[str, str]:
    return {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "OPENAI_MAX_RETRIES": "1",
        "VOICE_LOCK_TTL_S": "3",
        "VOICE_PREWARM_TIMEOUT_S": "20",
        # the agent, where a test starts it, with test-sized lease timings
        "AGENT_LEASE_TTL": "3",
        "AGENT_LEASE_RENEW": "1",
        **extra,
    }


def write_preset(system: System, file_name: str, preset: dict[str, Any] | str) -> Path:
    folder = system.runtime / "voice-presets"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / file_name
    path.write_text(preset if isinstance(preset, str) else json.dumps(preset))
    return path


@pytest.fixture(scope="module")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    process = StandinProcess(log_dir=tmp_path_factory.mktemp("standin")).start()
    yield process
    process.stop()


@pytest.fixture
def make_system(
    tmp_path: Path, standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[Callable[..., System]]:
    """``make_system(*services, quiet=True, **env)`` → a started System (quiet: the greeting-less preset)."""
    standin.reset()
    made: list[System] = []

    def make(*services: str, quiet: bool = True, **env: str) -> System:
        system = System(tmp_path, env=voice_env(standin, **env))
        made.append(system)
        if quiet:
            write_preset(system, "quiet.json", QUIET)
        system.start("ledger", *services)
        return system

    yield make
    rep = getattr(request.node, "rep_call", None)
    for system in made:
        if rep is not None and rep.failed:
            out = ROOT / "test-output" / "logs" / request.node.name
            out.mkdir(parents=True, exist_ok=True)
            (out / "services.log").write_text(system.dump_logs() + "\n===== standin\n" + standin.log_text()[-8000:])
        system.stop()


@pytest.fixture
async def connect() -> AsyncIterator[Callable[[System], Any]]:
    """``await connect(system)`` → (bus, caller): the test's own identity on the system's NATS."""
    opened: list[tuple[Bus, Caller]] = []

    async def open_(system: System) -> tuple[Bus, Caller]:
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "test-probe")
        caller = Caller(bus)
        opened.append((bus, caller))
        return bus, caller

    yield open_
    for bus, caller in opened:
        await caller.close()
        await bus.close()
