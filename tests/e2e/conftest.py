"""One OpenAI stand-in process for the end-to-end tests, reset before each test (a test's
System is stopped before the next one starts, so nothing of one test reaches the next)."""

from collections.abc import Iterator

import pytest

from tests.agent.rig import start_standin
from tests.support.standin import StandinProcess


@pytest.fixture(scope="session")
def standin_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandinProcess]:
    process = start_standin(tmp_path_factory.mktemp("e2e-standin"))
    yield process
    process.stop()


@pytest.fixture
def standin(standin_process: StandinProcess) -> StandinProcess:
    """The shared stand-in with no script, no recorded requests and no Realtime sessions."""
    standin_process.reset()
    return standin_process
