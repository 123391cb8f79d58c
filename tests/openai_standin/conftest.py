"""One stand-in process for the whole session, reset before each test."""

from collections.abc import AsyncIterator, Iterator

import pytest
from openai import AsyncOpenAI, OpenAI

from delegate.openai_standin.settings import OFFLINE_KEY
from tests.support.standin import StandinProcess, start_standin


@pytest.fixture(scope="session")
def standin_process() -> Iterator[StandinProcess]:
    with start_standin() as standin:
        yield standin


@pytest.fixture
def standin(standin_process: StandinProcess) -> StandinProcess:
    standin_process.reset()
    return standin_process


@pytest.fixture
def client(standin: StandinProcess) -> Iterator[OpenAI]:
    with standin.client(max_retries=0, timeout=10) as sdk:
        yield sdk


@pytest.fixture
async def aclient(standin: StandinProcess) -> AsyncIterator[AsyncOpenAI]:
    async with standin.async_client(max_retries=0, timeout=10) as sdk:
        yield sdk


@pytest.fixture
def demo(standin: StandinProcess) -> Iterator[OpenAI]:
    """A client like the services' under `make run` without a key: the demo answers it."""
    with OpenAI(api_key=OFFLINE_KEY, base_url=standin.base_url, max_retries=0, timeout=10) as sdk:
        yield sdk
