"""Shared fixtures: a private nats-server per test, real service processes on demand."""

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import start_nats
from tests.support.standin import StandinProcess
from tests.support.system import ARTIFACT_LOG_CHARS, SYSTEMS, System

# The lanes (make test-fast): process-starting fixtures mark their tests `integration`; the
# files in the order that lets both workers of `make test` finish together (longest first); the
# processes tests start reusing their compiled bytecode.
pytest_plugins = ["tests.support.lanes", "tests.support.schedule", "tests.support.bytecode"]

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "test-output"


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    """A fresh nats-server with its own JetStream store; tests may kill or restart it.

    Authentication is on (DELEGATE_TEST_NATS_AUTH=0 turns it off); ``url`` logs in as the
    test identity, which may do everything.
    """
    server = start_nats(tmp_path / "nats")
    yield server
    server.stop()


@pytest.fixture
def nats_url(nats_server: NatsServer) -> str:
    """The server as the test identity (the URL carries user and password)."""
    return nats_server.url


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A test connection standing in for every stream owner (all streams ensured)."""
    b = await Bus.connect(nats_server.url, "test")
    await b.ensure_streams(all_owners=True)
    yield b
    await b.close()


@pytest.fixture(scope="session")
def shared_standin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    """One OpenAI stand-in process for the whole run; tests take it through a ``standin``
    fixture that resets it (no script, no recorded requests, no Realtime sessions). A test's
    System is stopped before the next one starts, so nothing of one test reaches the next; a
    test that needs a stand-in started with other settings starts its own."""
    process = StandinProcess(log_dir=tmp_path_factory.mktemp("standin")).start()
    yield process
    process.stop()


@pytest.fixture
def standin(shared_standin: StandinProcess) -> StandinProcess:
    """The run's one stand-in, reset: no script, no recorded requests, no Realtime sessions.
    A module that needs a stand-in of its own (other settings) defines its own ``standin``."""
    shared_standin.reset()
    return shared_standin


@pytest.fixture(scope="module")
def module_standin(shared_standin: StandinProcess) -> StandinProcess:
    """The run's stand-in for a module that shares one System: reset once, when the module starts."""
    shared_standin.reset()
    return shared_standin


@pytest.fixture
def system(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[System]:
    """Real processes for end-to-end tests; logs are kept under test-output/ on failure."""
    sys_ = System(tmp_path)
    yield sys_
    sys_.stop()
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        out = ARTIFACTS / "logs" / request.node.name
        out.mkdir(parents=True, exist_ok=True)
        (out / "services.log").write_text(sys_.dump_logs(ARTIFACT_LOG_CHARS))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()  # type: ignore[attr-defined]
    setattr(item, f"rep_{rep.when}", rep)
    if rep.when == "call" and rep.failed:
        # The services this test used: those it started (stopped by now) and those still running
        # for its module. Their log tails go into the failure report, which is all CI prints.
        started = getattr(item, "_started_at", 0.0)
        used = [s for s in SYSTEMS if s.created >= started or (not s.stopped and s.logged_since(started))]
        for number, system in enumerate(used):
            rep.sections.append((f"service logs {number + 1} (tails)", system.dump_logs(tail=2500)))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item._started_at = time.monotonic()  # type: ignore[attr-defined]
    SYSTEMS[:] = [s for s in SYSTEMS if not s.stopped]  # earlier tests' are reported already
