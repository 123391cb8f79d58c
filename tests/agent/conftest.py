"""Agent tests: a real nats-server, real ledger and agent processes, the real OpenAI stand-in."""

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from tests.agent.rig import Probe, agent_env, dump_on_failure
from tests.support.standin import StandinProcess
from tests.support.system import System

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def make_system(
    tmp_path: Path, standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[Callable[..., System]]:
    """``make_system(**env)`` → a System with the agent pointed at the stand-in (not started yet)."""
    made: list[System] = []

    def make(**env: str) -> System:
        system = System(tmp_path, env=agent_env(standin, **env))
        made.append(system)
        return system

    yield make
    rep = getattr(request.node, "rep_call", None)
    for system in made:
        if rep is not None and rep.failed:
            dump_on_failure(system, standin, ROOT / "test-output" / "logs" / request.node.name)
        system.stop()


@pytest.fixture
async def probe_for() -> AsyncIterator[Callable[[System], Awaitable[Probe]]]:
    probes: list[Probe] = []

    async def open_probe(system: System) -> Probe:
        assert system.nats is not None
        probe = await Probe.open(system.nats.url)
        probes.append(probe)
        return probe

    yield open_probe
    for probe in probes:
        await probe.close()
