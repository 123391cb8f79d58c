"""Fixtures: a bus for the test itself, and the gateway app served by a real uvicorn."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from delegate.runtime.bus import Bus
from delegate.runtime.procs import NatsServer

from .helpers import Gateway, gateway_settings, running_gateway


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url, "test")
    await b.ensure_streams()
    yield b
    await b.close()


@pytest.fixture
async def gateway(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Gateway]:
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "index.html").write_text("<!doctype html><title>Delegate</title>")
    async with running_gateway(gateway_settings(nats_server.url, tmp_path)) as gw:
        yield gw
