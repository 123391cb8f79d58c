"""``python -m delegate.ledger migrate``: a 100,000-event SQLite ledger into real PostgreSQL
databases, through the real command; killed halfway and resumed; refusing foreign targets;
then the real ledger service carrying on from the migrated database."""

import asyncio
import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Fence, ThoughtflowArtifact, make_event
from delegate.contracts.ids import format_ts
from delegate.contracts.messages import PageRequest, QueryRequest
from delegate.ledger.migrate import Refused, sqlite_file
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore, event_row
from delegate.runtime.bus import Bus
from tests.support.postgres import PrivatePostgres
from tests.support.system import System, run_sync
from tests.support.waiting import eventually, eventually_sync

from .builders import BASE, conversation_ended, conversation_opened, message, span_closed, span_opened, term_started

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOTAL = 100_000
BATCH = 5000  # the command's batch: a killed run leaves whole ones
PROJECTIONS = ("conversations", "spans", "terms", "fences", "thoughtflow_artifacts", "ledger_state")
PG_TS = """to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')"""


# ---- the source: a ledger written by the SQLite store's own write path ------------------------

def _rows() -> tuple[list[tuple[Any, ...]], list[Fence | None]]:
    """Conversations of 1,000 events in spans of 50, a term now and then (fenced, as the agent's
    are), a thoughtflow picture per conversation. Plain messages are cloned from one real row
    (building 100,000 pydantic events would take most of the test's time)."""
    template = event_row(message("m"))
    rows: list[tuple[Any, ...]] = []
    fences: list[Fence | None] = []

    def add(row: tuple[Any, ...], fence: Fence | None = None) -> None:
        ts = format_ts(BASE + timedelta(milliseconds=len(rows)))
        rows.append((row[0], ts, *row[2:]))
        fences.append(fence)

    while len(rows) < TOTAL:
        n = len(rows) // 1000
        conv = f"c{n}"
        add(event_row(conversation_opened(conv)))
        term = term_started(f"t{n}", supersedes=f"t{n - 1}" if n else None)
        add(event_row(term), Fence(singleton="agent", token=n + 1))
        picture = ThoughtflowArtifact(
            run_id=f"run-{n}", run_type="task", d2_path=f"thoughtflow/run-{n}/flow.d2",
            svg_path=f"thoughtflow/run-{n}/flow.svg", bytes=100 + n, through_seq=len(rows),
        )
        add(event_row(make_event(picture, conversation_id=conv, span_id=None, channel="inner")))
        for s in range(19):
            span = f"{conv}-s{s}"
            add(event_row(span_opened(span, conv=conv)))
            for _ in range(48 if s else 45):
                cmid = f"client-{len(rows)}" if len(rows) % 7 == 0 else None  # found by index: copied too
                payload = json.dumps({"text": f"m{len(rows)}", "client_msg_id": cmid}, separators=(",", ":"))
                add((str(uuid.uuid4()), "", conv, span, *template[4:8], cmid, payload))
            add(event_row(span_closed(span, conv=conv)))
        add(event_row(conversation_ended(conv)) if n % 2 else event_row(message("still open", conv=conv, span=None)))
    return rows[:TOTAL], fences[:TOTAL]


async def _write_source(path: Path) -> None:
    store = SqliteStore(path, journal_mode="WAL", synchronous="OFF")  # a test file: no fsync per batch
    await store.open()
    rows, fences = _rows()
    for i in range(0, TOTAL, BATCH):
        await store.write(rows[i : i + BATCH], fences=fences[i : i + BATCH], announced_through=i)
    await store.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("source") / "ledger.sqlite"
    run_sync(_write_source(path))
    with sqlite3.connect(path) as conn:
        for table in PROJECTIONS:  # every projection has something to carry over
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0] > 0, table
    return path


# ---- targets: fresh databases, dropped at the end -------------------------------------------

@pytest.fixture(scope="module")
def databases(postgres: PrivatePostgres) -> Iterator[Callable[[], str]]:
    """Call it for the URL of a fresh database; each is dropped at the end."""
    made: list[str] = []

    def fresh() -> str:
        made.append(postgres.create_database("test_migrate"))
        return made[-1]

    yield fresh
    for url in made:
        postgres.drop_database(url)


# ---- the command, and independent checks ----------------------------------------------------

def command(source: Path, target: str) -> list[str]:
    return [sys.executable, "-m", "delegate.ledger", "migrate", "--from", f"sqlite:///{source}", "--to", target]


def migrate(source: Path, target: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOG_LEVEL": "WARNING"}
    return subprocess.run(command(source, target), env=env, capture_output=True, text=True, timeout=60)


def _digest(rows: Any) -> tuple[int, str]:
    sha = hashlib.sha256()
    n = 0
    for row in rows:
        sha.update(json.dumps(list(row)).encode() + b"\n")
        n += 1
    return n, sha.hexdigest()


COLS = "seq, id, {ts}, conversation_id, span_id, kind, channel, role, parent_id, {payload}"


def sqlite_digest(path: Path) -> tuple[int, str]:
    with sqlite3.connect(path) as conn:
        return _digest(conn.execute(f"SELECT {COLS.format(ts='ts', payload='payload')} FROM conversation_events"
                                    " ORDER BY seq"))


def pg_digest(url: str) -> tuple[int, str]:
    with psycopg.connect(url) as conn:
        cur = conn.execute(f"SELECT {COLS.format(ts=PG_TS, payload='payload::text')} FROM conversation_events"
                           " ORDER BY seq")
        return _digest(cur)


def pg_count(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        try:
            return int(conn.execute("SELECT COUNT(*) FROM conversation_events").fetchone()[0])  # type: ignore[index]
        except psycopg.errors.UndefinedTable:
            return 0


def last_seq(conn: psycopg.Connection[Any]) -> int:
    """The newest committed seq; 0 before the command has created the schema."""
    try:
        return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0])  # type: ignore[index]
    except psycopg.errors.UndefinedTable:
        return 0


def projections_equal(path: Path, url: str) -> None:
    with sqlite3.connect(path) as lite, psycopg.connect(url) as pg:
        for table in PROJECTIONS:
            columns = [r[1] for r in lite.execute(f"PRAGMA table_info({table})")]
            cols = ", ".join(columns)
            mine = sorted(lite.execute(f"SELECT {cols} FROM {table}").fetchall(), key=repr)
            theirs = sorted(
                (tuple(format_ts(v) if hasattr(v, "tzinfo") else v for v in r)
                 for r in pg.execute(f"SELECT {cols} FROM {table}").fetchall()),
                key=repr,
            )
            assert mine == theirs, table


def snapshot(url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of the database's public schema, rows sorted: to show nothing changed."""
    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' ORDER BY 1"
        ).fetchall()]
        return {t: sorted(conn.execute(f'SELECT * FROM "{t}"').fetchall(), key=repr) for t in tables}


@dataclass
class Migrated:
    url: str
    line: str


@pytest.fixture(scope="module")
def migrated(source: Path, databases: Callable[[], str]) -> Migrated:
    url = databases()
    done = migrate(source, url)
    assert done.returncode == 0, done.stderr
    return Migrated(url, done.stdout.strip())


# ---- the tests ------------------------------------------------------------------------------

def test_sqlite_urls_name_absolute_paths() -> None:
    assert sqlite_file("sqlite:///srv/ledger.sqlite") == Path("/srv/ledger.sqlite")
    assert sqlite_file("sqlite:////srv/ledger.sqlite") == Path("/srv/ledger.sqlite")
    assert sqlite_file("sqlite:////srv/my%20ledger.sqlite") == Path("/srv/my ledger.sqlite")
    for wrong in ("sqlite://host/ledger.sqlite", "sqlite:///", "postgresql:///ledger", "/srv/ledger.sqlite"):
        with pytest.raises(Refused):
            sqlite_file(wrong)


def test_migrates_every_event_and_projection_verified(source: Path, migrated: Migrated) -> None:
    count, digest = sqlite_digest(source)
    assert (count, digest) == pg_digest(migrated.url) and count == TOTAL
    with sqlite3.connect(source) as lite, psycopg.connect(migrated.url) as pg:
        by_client = "SELECT seq, client_msg_id FROM conversation_events WHERE client_msg_id IS NOT NULL ORDER BY seq"
        assert lite.execute(by_client).fetchall() == pg.execute(by_client).fetchall() != []
    assert f"migrated {TOTAL} events ({TOTAL} copied now), last seq {TOTAL}, sha256 {digest}," in migrated.line
    projections_equal(source, migrated.url)

    again = migrate(source, migrated.url)  # a finished target: nothing to copy, verified again
    assert again.returncode == 0, again.stderr
    assert f"({0} copied now)" in again.stdout and digest in again.stdout


def test_a_killed_run_leaves_whole_batches_and_the_next_one_finishes(
    source: Path, databases: Callable[[], str]
) -> None:
    url = databases()
    proc = subprocess.Popen(command(source, url), env={**os.environ, "LOG_LEVEL": "WARNING"},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            def halfway() -> bool:  # a batch takes ~0.1 s, a poll ~1 ms
                if last_seq(conn) >= TOTAL // 2:
                    return True
                assert proc.poll() is None, ("finished before it could be killed", proc.communicate())
                return False

            eventually_sync(halfway, "the migration halfway", 60, interval=0.01)
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(10) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.communicate()
    left = pg_count(url)
    assert 0 < left < TOTAL and left % BATCH == 0, left
    with psycopg.connect(url) as conn:
        for table in PROJECTIONS:  # written only by the last transaction
            assert conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone() == (0,), table

    done = migrate(source, url)
    assert done.returncode == 0, done.stderr
    assert f"({TOTAL - left} copied now)" in done.stdout
    assert pg_digest(url) == sqlite_digest(source)
    projections_equal(source, url)


async def _other_ledger(url: str) -> None:
    store = PostgresStore(url, max_size=1)
    await store.open()
    await store.append([message("not from this source", t=i) for i in range(3)])
    await store.close()


def test_refuses_a_target_with_other_data_and_leaves_it_unchanged(source: Path, databases: Callable[[], str]) -> None:
    other = databases()
    run_sync(_other_ledger(other))
    before = snapshot(other)
    done = migrate(source, other)
    assert done.returncode == 2 and "not the first 3 of the source" in done.stderr, done
    assert snapshot(other) == before

    unrelated = databases()
    with psycopg.connect(unrelated) as conn:
        conn.execute("CREATE TABLE invoices (id INT PRIMARY KEY)")
        conn.execute("INSERT INTO invoices VALUES (1)")
    done = migrate(source, unrelated)
    assert done.returncode == 2 and "invoices" in done.stderr, done
    assert snapshot(unrelated) == {"invoices": [(1,)]}

    target = databases()
    not_a_ledger = source.parent / "other.sqlite"
    sqlite3.connect(not_a_ledger).close()
    done = migrate(not_a_ledger, target)
    assert done.returncode == 2 and "not a Delegate ledger" in done.stderr, done
    older = source.parent / "older.sqlite"
    with sqlite3.connect(older) as conn:  # a ledger the service has not brought up to date yet
        conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, name TEXT, applied_at TEXT)")
        conn.execute("INSERT INTO schema_version VALUES (3, 'terms', '')")
        conn.execute("CREATE TABLE conversation_events (seq INTEGER PRIMARY KEY)")
    done = migrate(older, target)
    assert done.returncode == 2 and "schema v3" in done.stderr, done
    assert snapshot(target) == {}


async def test_the_ledger_service_carries_on_from_the_migrated_database(
    migrated: Migrated, tmp_path: Path
) -> None:
    system = System(tmp_path, env={"DATABASE_URL": migrated.url})
    try:
        await asyncio.to_thread(system.start, "ledger")
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "migrate-test")
        try:
            event = message("after the move", conv="c-new", span=None)
            await bus.publish(topics.ledger_append("test"), event)

            async def stored() -> bool:
                reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=TOTAL))
                return bool(reply.events)

            await eventually(stored, "the new event stored")
            reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=TOTAL))
            assert [(e.id, e.seq) for e in reply.events] == [(event.id, TOTAL + 1)]
            page = await bus.request(topics.LEDGER_PAGE, PageRequest(limit=5))
            assert page.events[-1].id == event.id and page.cursor is not None
            older = await bus.request(topics.LEDGER_PAGE, PageRequest(before=page.cursor, limit=5))
            assert older.events and all((e.seq or 0) <= TOTAL for e in older.events)
        finally:
            await bus.close()
    finally:
        await asyncio.to_thread(system.stop)
