"""Fixtures the memory test modules share; each module that uses them brings its own ``running`` system."""

from collections.abc import AsyncIterator

import pytest

from delegate.runtime.bus import Bus
from tests.support.system import System, probe_bus


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as b:
        yield b
