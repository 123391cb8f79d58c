"""Fixtures of the bus tests: a connection standing in for every stream owner."""

from collections.abc import AsyncIterator

import pytest

from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url, "test")
    await b.ensure_streams(all_owners=True)
    yield b
    await b.close()
