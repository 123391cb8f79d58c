"""Fixtures the tasks test modules share; each module brings its own ``running`` system."""

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from delegate.runtime.bus import Bus
from tests.support.system import System, owner_http, probe_bus

from .site import TestSite


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=30) as client:
        yield client


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as b:
        yield b


@pytest.fixture(scope="module")
def site() -> Iterator[TestSite]:
    """The local test site the tasks browse, one per module."""
    with TestSite() as s:
        yield s
