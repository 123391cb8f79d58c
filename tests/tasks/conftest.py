"""Fixtures the tasks test modules share; each module brings its own ``running`` system."""

from collections.abc import AsyncIterator

import httpx
import pytest

from delegate.runtime.bus import Bus
from tests.support.system import System, owner_http, probe_bus


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=30) as client:
        yield client


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as b:
        yield b
