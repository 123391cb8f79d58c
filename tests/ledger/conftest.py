"""Ledger fixtures: every store test runs on SQLite (WAL and DELETE journals) and PostgreSQL."""

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from delegate.ledger.store import LedgerStore
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore

PG_ADMIN_URL = os.environ.get("TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _with_database(url: str, name: str) -> str:
    base, _, _ = url.rpartition("/")
    return f"{base}/{name}"


@pytest.fixture(scope="session")
def pg_database() -> Iterator[str]:
    """A ``test_<uuid>`` database for this session, dropped at the end."""
    try:
        admin = psycopg.connect(PG_ADMIN_URL, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"PostgreSQL is not reachable on CI: {exc}")
        pytest.skip(f"PostgreSQL not reachable: {exc}")
    name = f"test_{uuid.uuid4().hex}"
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield _with_database(PG_ADMIN_URL, name)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class PgSchema:
    """A fresh schema inside the session database: a clean ledger without a new database each time."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self.name = f"t_{uuid.uuid4().hex[:16]}"

    def __enter__(self) -> str:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{self.name}"')
        return f"{self.database_url}?options={quote(f'-csearch_path={self.name}')}"

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


BACKENDS = ["sqlite-wal", "sqlite-delete", "postgres"]


@pytest.fixture(params=BACKENDS)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[LedgerStore]:
    pg = request.getfixturevalue("pg_url") if request.param == "postgres" else None
    s = make_store(request.param, tmp_path, pg)
    await s.open()
    yield s
    await s.close()


async def until(predicate, timeout: float = 20.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    """Poll ``predicate`` (sync or async) until true, failing after ``timeout`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        assert loop.time() < deadline, f"{what} not met within {timeout}s"
        await asyncio.sleep(0.05)
