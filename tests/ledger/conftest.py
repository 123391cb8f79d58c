"""Ledger fixtures: every store test runs on SQLite (WAL and DELETE journals) and PostgreSQL."""

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import DeadLetter
from delegate.launcher.procs import NatsServer
from delegate.ledger.main import serve
from delegate.ledger.settings import Settings
from delegate.ledger.store import LedgerStore
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.postgres import PrivatePostgres
from tests.support.waiting import eventually


@pytest.fixture(scope="session")
def postgres() -> Iterator[PrivatePostgres]:
    """The run's own PostgreSQL server (started on first use, a couple of seconds)."""
    server = PrivatePostgres().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def pg_database(postgres: PrivatePostgres) -> Iterator[str]:
    """A database for this session, dropped at the end."""
    url = postgres.create_database()
    yield url
    postgres.drop_database(url)


class PgSchema:
    """A fresh schema inside the session database: a clean ledger without a new database each time."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.name = f"t_{uuid.uuid4().hex[:16]}"

    def __enter__(self) -> str:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.name}"')
        # The session database's URL already has a query (the server's socket directory).
        return f"{self.database_url}&options={quote(f'-csearch_path={self.name}')}"

    def __exit__(self, *exc: object) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{self.name}" CASCADE')


@pytest.fixture
def pg_url(pg_database: str) -> Iterator[str]:
    with PgSchema(pg_database) as url:
        yield url


def make_store(backend: str, tmp_path: Path, pg_url: str | None = None) -> LedgerStore:
    if backend == "postgres":
        assert pg_url is not None
        return PostgresStore(pg_url, max_size=2)
    mode = "WAL" if backend == "sqlite-wal" else "DELETE"
    return SqliteStore(tmp_path / "db" / "assistant.sqlite", journal_mode=mode)


# PostgreSQL is a server process of its own: its runs are not for the fast lane.
BACKENDS = ["sqlite-wal", "sqlite-delete", pytest.param("postgres", marks=pytest.mark.integration)]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LedgerStore]:
    pg = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    s = make_store(request.param, tmp_path, pg)
    await s.open()
    yield s
    await s.close()


@dataclass
class Running:
    """The ledger's own code path (``serve``) running in this process, and a test connection."""

    bus: Bus  # the test's own connection
    settings: Settings
    committed: list[Event] = field(default_factory=list)
    service: "asyncio.Task[None] | None" = None
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def announced(self, event_id: str) -> bool:
        return any(e.id == event_id for e in self.committed)

    async def start(self) -> None:
        self.stop = asyncio.Event()
        self.service = asyncio.create_task(serve(self.settings, self.stop))
        service = self.service

        async def ready() -> bool:
            assert not service.done(), service
            try:
                return (await self.bus.ping("ledger", timeout=0.3)).ready
            except Exception:
                return False

        await eventually(ready, "ledger ready")

    async def halt(self) -> None:
        """SIGTERM, in effect: the batch in hand is committed and acked, then it returns."""
        self.stop.set()
        if self.service is not None:
            await asyncio.wait_for(self.service, 20)
            self.service = None


StartLedger = Callable[..., Awaitable[Running]]


@pytest.fixture
async def start_ledger(
    nats_server: NatsServer, nats_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[StartLedger]:
    """Start a ledger: ``await start_ledger(backend="sqlite", **settings)``; stopped at the end.

    The ledger logs in with its own role's identity, so its permissions are tested too; the
    test's connection (``Running.bus``) is the all-powerful test identity.
    """
    started: list[Running] = []

    async def start(backend: str = "sqlite", **overrides: Any) -> Running:
        database_url = request.getfixturevalue("pg_url") if backend == "postgres" else None
        values: dict[str, Any] = {
            "nats_url": role_url(nats_server, "ledger"), "runtime_data_dir": tmp_path / "runtime-data",
            "database_url": database_url,
            "sqlite_journal_mode": None, "timeline_history_event_limit": 500, "ledger_ack_wait_seconds": 3.0,
        }
        values.update(overrides)
        settings = Settings(_env_file=None, **values)
        bus = await Bus.connect(nats_url, "ledger-test")
        running = Running(bus, settings)

        async def on_committed(event: Event) -> None:
            running.committed.append(event)

        await bus.subscribe(topics.LEDGER_COMMITTED, on_committed)
        started.append(running)
        await running.start()
        return running

    yield start
    for running in started:
        await running.halt()
        await running.bus.close()


@pytest.fixture(params=["sqlite"])
async def ledger(request: pytest.FixtureRequest, start_ledger: StartLedger) -> Running:
    return await start_ledger(request.param)


async def dead_letters(bus: Bus, count: int) -> list[DeadLetter]:
    """The first ``count`` dead letters, once there are that many."""

    async def enough() -> bool:
        return (await bus.js.stream_info("DEAD")).state.messages >= count

    await eventually(enough, f"{count} dead letters")
    psub = await bus.js.pull_subscribe("dead.evt.>", stream="DEAD")
    try:
        msgs = await psub.fetch(count, timeout=5)
    finally:
        await psub.unsubscribe()
    return [DeadLetter.model_validate_json(m.data) for m in msgs]
