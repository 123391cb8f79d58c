"""Fixtures: a bus for the test itself, and the gateway app served by a real uvicorn."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import role_url

from .helpers import Gateway, gateway_settings, running_gateway


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    b = await Bus.connect(nats_server.url, "test")
    await b.ensure_streams(all_owners=True)
    yield b
    await b.close()


@pytest.fixture
async def gateway(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Gateway]:
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "index.html").write_text("<!doctype html><title>Delegate</title>")
    # The gateway logs in as itself: a permission its role lacks fails here, as in production.
    async with running_gateway(gateway_settings(role_url(nats_server, "gateway"), tmp_path)) as gw:
        yield gw
