"""A service says "ready" only while it does its job: the pollers once the outbox runs and, when
configured, IMAP is connected."""

import asyncio
from pathlib import Path

import pytest

from delegate.contracts.messages import Pong
from delegate.launcher.procs import free_port
from delegate.runtime.bus import Bus, BusUnavailable
from tests.support.system import System

pytestmark = pytest.mark.integration


async def _first_pong(url: str, service: str, timeout: float = 30.0) -> Pong:
    bus = await Bus.connect(url, "test-probe")
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    return await bus.ping(service, timeout=0.5)
                except BusUnavailable:
                    await asyncio.sleep(0.1)  # not subscribed yet: ask again
    finally:
        await bus.close()


async def test_the_pollers_are_not_ready_while_their_imap_server_is_unreachable(tmp_path: Path) -> None:
    # nothing listens on this port: the inbox keeps reconnecting, so the pollers must not say ready
    system = System(tmp_path, env={"IMAP_HOST": "127.0.0.1", "IMAP_PORT": str(free_port()), "IMAP_TLS": "none"})
    try:
        system.start("ledger")
        system.start_one("pollers")
        assert system.nats is not None
        pong = await _first_pong(system.nats.url, "pollers")
        async with asyncio.timeout(30):
            while "imap failing" not in pong.detail:
                await asyncio.sleep(0.1)
                pong = await _first_pong(system.nats.url, "pollers")
        assert pong.ready is False
        assert "skeleton" not in pong.detail
    finally:
        system.stop()


async def test_the_pollers_without_imap_are_ready_once_the_outbox_runs(tmp_path: Path) -> None:
    system = System(tmp_path)
    try:
        system.start("ledger", "pollers")  # waits for ready=True
        assert system.nats is not None
        pong = await _first_pong(system.nats.url, "pollers")
        assert pong.ready is True and "imap off" in pong.detail
    finally:
        system.stop()
