"""Fixtures: the gateway app served by a real uvicorn (the test's bus is tests/conftest.py's), and the
owner's HTTP client for the API modules (each brings its own ``running`` system)."""

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from delegate.launcher.procs import NatsServer
from tests.support.nats import role_url
from tests.support.system import System, owner_http

from .helpers import Gateway, gateway_settings, running_gateway


@pytest.fixture
async def gateway(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Gateway]:
    (tmp_path / "client").mkdir()
    (tmp_path / "client" / "index.html").write_text("<!doctype html><title>Delegate</title>")
    # The gateway logs in as itself: a permission its role lacks fails here, as in production.
    async with running_gateway(gateway_settings(role_url(nats_server, "gateway"), tmp_path)) as gw:
        yield gw


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=20) as client:
        yield client
