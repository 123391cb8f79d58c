"""The inner plane's reminders need JetStream message schedules (nats-server 2.12+).

Against Debian's nats-server 2.9, which would take a schedule and never fire it, the inner plane
refuses to start: it says why in its log and in its ping, and the gateway's /readyz shows it.
Once the server at the same address is the pinned one, it starts by itself and runs.
"""

from pathlib import Path
from typing import Any

import httpx
import pytest

from delegate.runtime.bus import Bus
from tests.support.nats import start_debian_nats, upgraded
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration

REFUSAL = "nats-server 2.9.10 is too old: JetStream message schedules (reminders fire from them) came in 2.12.0"


async def _readyz(system: System) -> tuple[int, dict[str, Any]]:
    async with httpx.AsyncClient() as http:
        try:
            r = await http.get(f"{system.http}/readyz", timeout=3)
        except httpx.HTTPError:
            return 0, {}
        return r.status_code, r.json()


async def _until_readyz(system: System, accept: Any, timeout: float = 30.0) -> dict[str, Any]:
    seen: list[tuple[int, dict[str, Any]]] = []

    async def accepted() -> tuple[int, dict[str, Any]] | None:
        seen.append(await _readyz(system))
        return seen[-1] if accept(*seen[-1]) else None

    answer: tuple[int, dict[str, Any]] = await eventually(accepted, "an accepted /readyz answer", timeout,
                                                          explain=lambda: f"last: {seen[-1:]}")
    return answer[1]


async def _until_pong(bus: Bus, service: str, ready: bool, timeout: float = 30.0) -> Any:
    async def pong() -> Any:
        try:
            answer = await bus.ping(service, timeout=0.5)
        except Exception:  # not up yet, or not subscribed: ask again
            return None
        return answer if answer.ready == ready else None

    return await eventually(pong, f"{service} to answer ready={ready}", timeout)


async def test_on_debian_nats_2_9_the_inner_plane_refuses_and_readyz_says_why(tmp_path: Path) -> None:
    system = System(tmp_path / "system", nats=start_debian_nats(tmp_path / "nats"), separate=("inner-plane",))
    try:
        system.start("gateway", "inner-plane", "ledger", wait=False)
        body = await _until_readyz(
            system, lambda status, b: status == 503 and {"inner-plane", "ledger"} <= set(b.get("reasons", {}))
        )
        assert body["missing"] == ["ledger", "agent", "inner-plane"]
        assert body["reasons"]["inner-plane"].startswith(REFUSAL)
        assert "Run nats-server 2.12.0 or newer" in body["reasons"]["inner-plane"]
        assert "atomic batch publish" in body["reasons"]["ledger"]  # the LEDGER stream's imports
        assert "refusing to start: " + REFUSAL in system.procs["inner-plane"].log_text()
        assert system.procs["inner-plane"].alive()  # refusing, not crashing in a restart loop
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "test")
        try:
            # Neither made the streams it owns: no REMINDERS stream whose schedules never fire.
            # (The gateway's sign-in sessions and push subscriptions buckets need nothing new.)
            names = sorted(info.config.name or "" for info in await bus.js.streams_info())
            assert names == ["KV_gateway_sessions", "KV_push_subscriptions"], names
        finally:
            await bus.close()
    finally:
        system.stop()


async def test_a_refusing_inner_plane_starts_once_the_server_is_upgraded(tmp_path: Path) -> None:
    old = start_debian_nats(tmp_path / "old-nats")
    system = System(tmp_path / "system", nats=old, separate=("inner-plane",))
    try:
        system.start("inner-plane", wait=False)
        bus = await Bus.connect(old.url, "test")
        try:
            refused = await _until_pong(bus, "inner-plane", ready=False)
            assert refused.refusal.startswith(REFUSAL)
        finally:
            await bus.close()
        old.stop()
        system.nats = upgraded(old, tmp_path / "new-nats").start()  # same address and users
        system.start("ledger")  # the inner plane catches up with the ledger before it is ready
        bus = await Bus.connect(system.nats.url, "test")
        try:
            started = await _until_pong(bus, "inner-plane", ready=True)
            assert started.refusal == ""
            assert (await bus.js.stream_info("REMINDERS")).config.allow_msg_schedules
        finally:
            await bus.close()
        assert system.procs["inner-plane"].alive()
        assert "has what this service needs: starting" in system.procs["inner-plane"].log_text()
    finally:
        system.stop()
