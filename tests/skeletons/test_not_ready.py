"""A service says "ready" only while it does its job: the pollers once the outbox runs and, when
configured, IMAP is connected."""

from pathlib import Path

import pytest

from delegate.contracts.messages import Pong
from delegate.launcher.procs import free_port
from delegate.runtime.bus import Bus, BusUnavailable
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


async def _first_pong(url: str, service: str, timeout: float = 30.0) -> Pong:
    bus = await Bus.connect(url, "test-probe")

    async def pong() -> Pong | None:
        try:
            return await bus.ping(service, timeout=0.5)
        except BusUnavailable:  # not subscribed yet: ask again
            return None

    try:
        return await eventually(pong, f"{service} to answer a ping", timeout, interval=0.1)
    finally:
        await bus.close()


async def test_the_pollers_are_not_ready_while_their_imap_server_is_unreachable(tmp_path: Path) -> None:
    # nothing listens on this port: the inbox keeps reconnecting, so the pollers must not say ready
    system = System(tmp_path, env={"IMAP_HOST": "127.0.0.1", "IMAP_PORT": str(free_port()), "IMAP_TLS": "none"})
    try:
        system.start("ledger")
        system.start_one("pollers")
        assert system.nats is not None
        url = system.nats.url

        async def failing() -> Pong | None:
            pong = await _first_pong(url, "pollers")
            return pong if "imap failing" in pong.detail else None

        pong = await eventually(failing, "the pollers to say their IMAP server is failing", interval=0.1)
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
