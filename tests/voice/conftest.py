"""Voice tests: real nats-server, ledger and voice processes (the agent where tools are needed),
the real OpenAI stand-in speaking Realtime; the test plays the gateway's side over the bus."""

import json
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from delegate.runtime.bus import Bus
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import ARTIFACT_LOG_CHARS, System, run_sync
from tests.voice.peer import Caller, poll_state

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


@pytest.fixture(scope="session")
def standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    process = StandinProcess(log_dir=tmp_path_factory.mktemp("standin")).start()
    yield process
    process.stop()


SystemKey = tuple[tuple[str, ...], bool, tuple[tuple[str, str], ...]]


@pytest.fixture(scope="session")
def shared_systems(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[SystemKey, System]]:
    """The started Systems, one per set of services and settings, reused by every voice test."""
    systems: dict[SystemKey, System] = {}
    yield systems
    with ThreadPoolExecutor() as pool:  # together: each one mostly waits for its processes to exit
        list(pool.map(System.stop, systems.values()))


async def _voice_idle(system: System) -> None:
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test-probe")
    try:
        await poll_state(bus, "idle")
    finally:
        await bus.close()


@pytest.fixture
def make_system(
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    standin: StandinProcess,
    shared_systems: dict[SystemKey, System],
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., System]]:
    """``make_system(*services, quiet=True, fresh=False, **env)`` → a started System (quiet: the
    greeting-less preset).

    Processes start once for each set of services and settings: a later test asking for the
    same set gets the same System back once its voice is idle (every test's sessions are its
    own, the stand-in is reset). ``fresh=True`` is a System of the test's own, for a test that
    kills or stops processes or leaves state behind (preset files) that others must not see.
    """
    standin.reset()
    used: list[System] = []
    own: list[System] = []

    def make(*services: str, quiet: bool = True, fresh: bool = False, **env: str) -> System:
        key: SystemKey = (services, quiet, tuple(sorted(env.items())))
        if not fresh and key in shared_systems:
            system = shared_systems[key]
            dead = [name for name, proc in system.procs.items() if not proc.alive()]
            assert not dead, f"a shared System lost {dead}: a test that kills processes needs fresh=True"
            used.append(system)
            if "voice" in services:
                run_sync(_voice_idle(system))  # the previous test's last session has ended
                standin.reset()  # and nothing it sent the stand-in on its way out is left there
            return system
        if fresh:
            system = System(tmp_path, env=voice_env(standin, **env))
            own.append(system)
        else:
            system = System(tmp_path_factory.mktemp("system"), env=voice_env(standin, **env))
            shared_systems[key] = system
        used.append(system)
        if quiet:
            write_preset(system, "quiet.json", QUIET)
        # A test of its own System may kill or stop its voice: that one runs alone.
        system.start("ledger", *services, separate=("voice",) if fresh else ())
        return system

    yield make
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        out = ROOT / "test-output" / "logs" / request.node.name
        out.mkdir(parents=True, exist_ok=True)
        logs = "\n".join(system.dump_logs(ARTIFACT_LOG_CHARS) for system in used)
        (out / "services.log").write_text(logs + "\n===== standin\n" + standin.log_text()[-8000:])
    for system in own:
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
