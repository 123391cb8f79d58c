"""Voice and pollers are skeletons until their issues: alive on the bus, never "ready"."""

import asyncio
from pathlib import Path

import pytest

from delegate.contracts.messages import Pong
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


@pytest.mark.parametrize(("service", "says"), [("voice", "Realtime"), ("pollers", "IMAP")])
async def test_a_skeleton_answers_ping_but_never_reports_ready(tmp_path: Path, service: str, says: str) -> None:
    system = System(tmp_path)
    try:
        system.start(service, wait=False)
        assert system.nats is not None
        pong = await _first_pong(system.nats.url, service)
        assert pong.service == service
        assert pong.ready is False
        assert "skeleton" in pong.detail and says in pong.detail
    finally:
        system.stop()
