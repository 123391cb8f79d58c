"""Inbox tests: a real IMAP server (pymap), a real nats-server and ledger process, and the
inbox running either in this process (as the pollers' NATS identity) or as the real pollers
process; what it did is read back from the AGENT stream and the ledger."""

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.pollers.health import Health
from delegate.pollers.inbox import Inbox
from delegate.pollers.settings import Settings
from delegate.runtime.bus import Bus
from tests.support.imap_server import ImapServer
from tests.support.nats import role_url
from tests.support.system import ARTIFACT_LOG_CHARS, System
from tests.support.waiting import eventually

OWNER = "owner@example.com"


@pytest.fixture
def imap(tmp_path: Path) -> Iterator[ImapServer]:
    # launched only: ``rig`` waits for it once its own processes are started too
    server = ImapServer(tmp_path / "logs" / "pymap.log").launch()
    yield server
    server.stop()


class Rig:
    """nats + ledger as processes, a test bus that sees everything, and inbox runners."""

    def __init__(self, system: System, imap: ImapServer, bus: Bus) -> None:
        self.system, self.imap, self.bus = system, imap, bus
        self._running: list[tuple[asyncio.Event, asyncio.Task[None], Bus]] = []
        self.health: Health | None = None

    def settings(self, **overrides: Any) -> Settings:
        values: dict[str, Any] = {
            "imap_host": self.imap.host, "imap_port": self.imap.port, "imap_user": self.imap.env()["IMAP_USER"],
            "imap_password": self.imap.env()["IMAP_PASSWORD"], "imap_tls": "none", "imap_start": "all",
            "owner_email": OWNER,            "imap_poll_s": 0.5, "runtime_data_dir": self.system.runtime,
        }
        values.update(overrides)
        return Settings(**values)

    async def start_inbox(self, **overrides: Any) -> Health:
        """The inbox in this process, connected as the pollers' own NATS identity."""
        assert self.system.nats is not None
        bus = await Bus.connect(role_url(self.system.nats, "pollers"), "pollers:test")
        stop, health = asyncio.Event(), Health()
        task = asyncio.create_task(Inbox(bus, self.settings(**overrides), health, stop).run())
        self._running.append((stop, task, bus))
        self.health = health
        return health

    async def stop_inboxes(self) -> None:
        for stop, task, bus in self._running:
            stop.set()
            await asyncio.wait_for(task, 20)
            await bus.close()
        self._running.clear()

    async def agent_inputs(self) -> list[dict[str, Any]]:
        """Every message in the AGENT stream (JetStream keeps what dedup let through)."""
        info = await self.bus.js.stream_info("AGENT")
        found: list[dict[str, Any]] = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            try:
                msg = await self.bus.js.get_msg("AGENT", seq)
            except Exception:  # a gap (deleted) is nothing to count
                continue
            if msg.subject == topics.AGENT_INPUT.subject and msg.data:
                found.append(json.loads(msg.data))
        return found

    async def events(self, kind: str) -> list[Event]:
        reply = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=[kind], limit=5000), timeout=10)
        return reply.events

    async def until(self, what: str, check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
        """``eventually``, with the services' log tail in the failure."""
        await eventually(check, what, timeout, interval=0.1, explain=lambda: self.system.dump_logs()[-4000:])


    async def wait_inputs(self, n: int, timeout: float = 20.0) -> list[dict[str, Any]]:
        async def enough() -> bool:
            return len(await self.agent_inputs()) >= n

        await self.until(f"{n} agent inputs", enough, timeout)
        return await self.agent_inputs()

    async def wait_events(self, kind: str, n: int, timeout: float = 20.0) -> list[Event]:
        async def enough() -> bool:
            return len(await self.events(kind)) >= n

        await self.until(f"{n} {kind} events", enough, timeout)
        return await self.events(kind)


@pytest.fixture
async def rig(tmp_path: Path, imap: ImapServer, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    system = System(tmp_path)
    system.start("ledger")
    imap.wait_listening()
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test")
    await bus.ensure_streams(all_owners=True)  # the agent is not running: create its stream for it
    made = Rig(system, imap, bus)
    try:
        yield made
    finally:
        await made.stop_inboxes()
        await bus.close()
        rep = getattr(request.node, "rep_call", None)
        if rep is not None and rep.failed:
            out = Path(__file__).resolve().parents[2] / "test-output" / "logs" / request.node.name
            out.mkdir(parents=True, exist_ok=True)
            (out / "services.log").write_text(system.dump_logs(ARTIFACT_LOG_CHARS))
        system.stop()
