"""``python -m delegate.ledger migrate --from sqlite:///path --to postgresql://...``: move a ledger.

Copies an existing SQLite ledger into PostgreSQL, verified event for event. Stop the ledger
service first: the source is opened read-only and read in one snapshot, so events written
meanwhile would be left behind (the run notices a source that changed, and fails).

- The target's schema is the service's own: ``PostgresStore.open`` runs its migrations.
- Events go over with their seq, id, ts, payload text and every other column unchanged, in
  seq order, ``BATCH`` rows per transaction (COPY). A run killed halfway leaves whole batches;
  the same command again finds them to be an exact prefix of the source and goes on after them.
- The projection tables (conversations, spans, terms, fences, thoughtflow_artifacts,
  ledger_state) are copied row for row, in one last transaction. They are not recomputed
  through the store's write path because they cannot be: the fences table holds tokens that
  events do not keep (the ledger judges a fence and drops it), ledger_state holds the writer's
  announced mark, and the terms/artifacts upserts depend on how events were batched. Row for
  row gives the same ledger the SQLite service had.
- A target holding anything else (other events, other tables, projections that are not the
  source's) is refused before anything is written.
- At the end both sides are counted and hashed (``EventDigest``) and every projection table is
  compared row for row; exit 0 only when they agree.

Exit codes: 0 verified, 1 failed (unreachable, verification, a source that changed), 2 refused.
"""

import asyncio
import hashlib
import json
import logging
import re
import sqlite3
import sys
import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote, urlsplit

import psycopg
from psycopg import sql

from delegate.contracts.ids import format_ts

from .store import POSTGRES_SCHEMES, StoreUnavailable
from .store.base import migrations
from .store.postgres import APPEND_LOCK, PostgresStore

log = logging.getLogger(__name__)

OK, FAILED, REFUSED = 0, 1, 2
BATCH = 5000  # events per target transaction: what a killed run can lose, and what it redoes
RUN_LOCK = 0x6C65646765720003  # "ledger" + 3: one migrate at a time into a database
EVENT_COLUMNS = (
    "seq", "id", "ts", "conversation_id", "span_id", "kind", "channel", "role", "parent_id", "client_msg_id", "payload"
)
# What the digest covers, in this order (client_msg_id is copied, but it is derived from the payload).
HASHED = "seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id"
NOT_PROJECTIONS = {"conversation_events", "schema_version", "sqlite_sequence"}


class Refused(Exception):
    """The source or target is not what a migration may touch. Found before anything is written,
    but for another writer turning up in the target halfway (then only whole batches are in)."""


class VerificationFailed(Exception):
    """The copy does not match its source."""


class EventDigest:
    """Count, last seq and SHA-256 of events in seq order, each hashed as one JSON line:
    ``[seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id, payload]`` (ts
    in the ledger's wire form, payload as the stored JSON text), ASCII-escaped, then a newline."""

    def __init__(self) -> None:
        self._sha = hashlib.sha256()
        self.count = 0
        self.last_seq = 0

    def add(self, row: Sequence[Any]) -> None:
        fields = list(row)
        if isinstance(fields[2], datetime):  # PostgreSQL's timestamptz: back to the text SQLite keeps
            fields[2] = format_ts(fields[2])
        self._sha.update(json.dumps(fields).encode() + b"\n")
        self.count += 1
        self.last_seq = int(fields[0])

    def hexdigest(self) -> str:
        return self._sha.hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EventDigest) and (self.count, self.hexdigest()) == (other.count, other.hexdigest())

    __hash__ = None  # type: ignore[assignment]  # mutable


def sqlite_file(url: str) -> Path:
    """``sqlite:///abs/path`` or ``sqlite:////abs/path``: both name the absolute path /abs/path."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc or not parts.path.strip("/"):
        raise Refused(f"--from must be sqlite:///absolute/path/ledger.sqlite, not {url!r}")
    return Path("/" + unquote(parts.path).lstrip("/"))


def open_source(path: Path) -> sqlite3.Connection:
    """The source, read-only (mode=ro still reads a WAL a stopped service left behind), if it is a
    Delegate ledger at the schema version this code knows: the PostgreSQL schema it lands in
    matches that version, and only the service may bring an older file up to it."""
    if not path.is_file():
        raise Refused(f"no SQLite ledger at {path}")
    # check_same_thread off: batches are read on a worker thread (one at a time, never two at once).
    conn = sqlite3.connect(
        f"file:{quote(str(path))}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
    )
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not {"schema_version", "conversation_events"} <= names:
            raise Refused(f"{path} is not a Delegate ledger (no schema_version / conversation_events table)")
        version = int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])
        known = migrations("sqlite")[-1].version
        if version != known:
            raise Refused(
                f"{path} is at ledger schema v{version}; this code migrates v{known}"
                + (" (start the ledger service on it once to bring it up to date)" if version < known else "")
            )
    except BaseException:
        conn.close()
        raise
    return conn


def ledger_tables() -> set[str]:
    """Every table the PostgreSQL migrations create (or rename into), and schema_version."""
    text = "\n".join(m.sql for m in migrations("postgres"))
    found = re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)|ALTER TABLE \w+ RENAME TO (\w+)", text, re.IGNORECASE)
    return {name for pair in found for name in pair if name} | {"schema_version"}


def projections(src: sqlite3.Connection) -> dict[str, list[str]]:
    """The source's projection tables and their columns (in the source's order)."""
    names = [
        r[0] for r in src.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if r[0] not in NOT_PROJECTIONS and not r[0].startswith("sqlite_")
    ]
    unknown = set(names) - ledger_tables()
    if unknown:
        raise Refused(f"the source has tables the PostgreSQL schema lacks: {sorted(unknown)}")
    return {name: [r[1] for r in src.execute(f'PRAGMA table_info("{name}")')] for name in names}


def source_digest(src: sqlite3.Connection, limit: int | None = None) -> EventDigest:
    digest = EventDigest()
    cur = src.execute(
        f"SELECT {HASHED}, payload FROM conversation_events ORDER BY seq LIMIT ?", (-1 if limit is None else limit,)
    )
    for row in cur:
        digest.add(row)
    return digest


async def target_digest(conn: psycopg.AsyncConnection[Any]) -> EventDigest:
    """Through a server-side cursor, in one snapshot: a big ledger is not held in memory."""
    digest = EventDigest()
    async with conn.transaction(), conn.cursor(name="migrate_digest") as cur:
        cur.itersize = BATCH  # rows per FETCH: the default 100 is a round trip per 100 events
        await cur.execute(f"SELECT {HASHED}, payload::text FROM conversation_events ORDER BY seq")
        async for row in cur:
            digest.add(row)
    return digest


def source_rows(src: sqlite3.Connection, table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    cols = ", ".join(f'"{c}"' for c in columns)
    return sorted(src.execute(f'SELECT {cols} FROM "{table}"').fetchall(), key=repr)


async def target_rows(conn: psycopg.AsyncConnection[Any], table: str, columns: list[str]) -> list[tuple[Any, ...]]:
    """A projection table's rows as SQLite holds them (timestamps as ledger text), sorted in
    Python: PostgreSQL's collation need not sort text as SQLite does."""
    query = sql.SQL("SELECT {} FROM {}").format(sql.SQL(", ").join(map(sql.Identifier, columns)), sql.Identifier(table))
    cur = await conn.execute(query)
    rows = [tuple(format_ts(v) if isinstance(v, datetime) else v for v in r) for r in await cur.fetchall()]
    return sorted(rows, key=repr)


async def _tables(conn: psycopg.AsyncConnection[Any]) -> set[str]:
    cur = await conn.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    )
    return {r[0] for r in await cur.fetchall()}


async def check_target(
    conn: psycopg.AsyncConnection[Any], src: sqlite3.Connection, tables: dict[str, list[str]], total: int
) -> EventDigest:
    """The digest of the source's events the target holds already, as an exact prefix (an earlier
    run's whole batches); raises ``Refused`` when it holds anything that is not ours to add to."""
    present = await _tables(conn)
    foreign = present - ledger_tables()
    if foreign:
        raise Refused(f"the target holds tables that are not the ledger's: {sorted(foreign)}")
    if "conversation_events" not in present:
        return EventDigest()
    there = await target_digest(conn)
    ours = source_digest(src, there.count)
    if there.count > total or there != ours:
        raise Refused(
            f"the target holds {there.count} events that are not the first {there.count} of the source"
        )
    for table, columns in tables.items():
        if table not in present:
            continue
        rows = await target_rows(conn, table, columns)
        # Projections are written last, with the final batch: a partial run never leaves any.
        if rows and (there.count < total or rows != source_rows(src, table, columns)):
            raise Refused(f"the target's {table} table holds rows that are not the source's")
    return ours


def _copy_statement(table: str, columns: Iterable[str]) -> sql.Composed:
    return sql.SQL("COPY {} ({}) FROM STDIN").format(
        sql.Identifier(table), sql.SQL(", ").join(map(sql.Identifier, columns))
    )


async def _locked_at(conn: psycopg.AsyncConnection[Any], expected_seq: int) -> None:
    """Inside a transaction: take the ledger's append lock and check nobody else wrote meanwhile."""
    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
    cur = await conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events")
    last = int((await cur.fetchone() or (0,))[0])
    if last != expected_seq:
        raise Refused(f"something else writes to the target (its last seq is {last}, expected {expected_seq})")


async def _set_next_seq(conn: psycopg.AsyncConnection[Any], high: int) -> None:
    # seq is a bigserial: explicit values do not move its sequence, so the service's next
    # event would collide. setval is not transactional, but only ever set to a copied seq.
    if high > 0:
        await conn.execute("SELECT setval(pg_get_serial_sequence('conversation_events', 'seq'), %s)", (high,))


async def copy_events(
    conn: psycopg.AsyncConnection[Any], src: sqlite3.Connection, digest: EventDigest
) -> int:
    """The source's events past ``digest.last_seq`` into the target, ``BATCH`` per transaction;
    each also goes into ``digest`` (the source's, which so reads the source once)."""
    select = f"SELECT {', '.join(EVENT_COLUMNS)} FROM conversation_events WHERE seq > ? ORDER BY seq LIMIT ?"

    def read(after: int) -> list[tuple[Any, ...]]:
        batch = src.execute(select, (after, BATCH)).fetchall()
        for row in batch:  # hashed as read, in seq order: reads never run two at once
            digest.add(row[:9] + row[10:])  # without client_msg_id: see HASHED
        return batch

    copied = 0
    after_seq = digest.last_seq
    rows = read(after_seq)
    while rows:
        # The next batch is read on a thread while this one is written: SQLite and PostgreSQL overlap.
        ahead = asyncio.ensure_future(asyncio.to_thread(read, rows[-1][0]))
        try:
            async with conn.transaction():
                await _locked_at(conn, after_seq)
                async with conn.cursor().copy(_copy_statement("conversation_events", EVENT_COLUMNS)) as copy:
                    for row in rows:
                        await copy.write_row(row)
                await _set_next_seq(conn, rows[-1][0])
        except BaseException:
            await asyncio.gather(ahead, return_exceptions=True)  # the connection is free before it closes
            raise
        after_seq = rows[-1][0]
        copied += len(rows)
        log.info("copied through seq %d", after_seq)
        rows = await ahead
    return copied


async def copy_projections(
    conn: psycopg.AsyncConnection[Any], src: sqlite3.Connection, tables: dict[str, list[str]], last_seq: int
) -> None:
    """Every projection table, replaced as a whole, and the seq sequence past the source's
    AUTOINCREMENT mark (SQLite never reuses a seq, even one whose event is gone)."""
    row = src.execute("SELECT seq FROM sqlite_sequence WHERE name = 'conversation_events'").fetchone()
    high = max(last_seq, int(row[0]) if row else 0)
    async with conn.transaction():
        await _locked_at(conn, last_seq)
        for table, columns in tables.items():
            await conn.execute(sql.SQL("DELETE FROM {}").format(sql.Identifier(table)))
            cols = ", ".join(f'"{c}"' for c in columns)
            async with conn.cursor().copy(_copy_statement(table, columns)) as copy:
                for values in src.execute(f'SELECT {cols} FROM "{table}"'):
                    await copy.write_row(values)
        await _set_next_seq(conn, high)


async def prepare_target(url: str) -> None:
    """The service's own schema, by the service's own code (the numbered migrations)."""
    store = PostgresStore(url, min_size=1, max_size=1)
    try:
        await store.open()
    finally:
        await store.close()


async def run(source_url: str, target_url: str) -> str:
    """The migration; returns the line to print. Raises ``Refused`` or a database error."""
    started = time.monotonic()
    if not target_url.startswith(POSTGRES_SCHEMES):
        raise Refused("--to must be a postgresql:// URL")
    src = open_source(sqlite_file(source_url))
    try:
        src.execute("BEGIN")  # one read snapshot for the whole run
        tables = projections(src)
        total = int(src.execute("SELECT COUNT(*) FROM conversation_events").fetchone()[0])
        async with await psycopg.AsyncConnection.connect(target_url, autocommit=True) as conn:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (RUN_LOCK,))
            if not (await cur.fetchone() or (False,))[0]:
                raise Refused("another migrate into this database is running")
            source = await check_target(conn, src, tables, total)  # before the schema is touched
            await prepare_target(target_url)
            copied = await copy_events(conn, src, source)
            await copy_projections(conn, src, tables, source.last_seq)
            target = await target_digest(conn)
            if target != source:
                raise VerificationFailed(
                    f"events differ: source {source.count} / {source.hexdigest()},"
                    f" target {target.count} / {target.hexdigest()}"
                )
            for table, columns in tables.items():
                if await target_rows(conn, table, columns) != source_rows(src, table, columns):
                    raise VerificationFailed(f"the {table} table differs")
        src.execute("COMMIT")
        # Out of the snapshot: a service still running would have added events meanwhile.
        now = src.execute("SELECT COUNT(*), COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()
        if tuple(now) != (source.count, source.last_seq):
            raise VerificationFailed("the source changed while it was copied: stop the ledger service and run again")
    finally:
        src.close()
    seconds = time.monotonic() - started
    return (
        f"migrated {source.count} events ({copied} copied now), last seq {source.last_seq},"
        f" sha256 {source.hexdigest()}, {seconds:.1f} s"
    )


async def migrate(source_url: str, target_url: str) -> int:
    """The CLI's entry: exit 0 only when the target holds exactly the source's ledger."""
    try:
        sys.stdout.write(await run(source_url, target_url) + "\n")
    except Refused as exc:
        sys.stderr.write(f"migrate refused: {exc}\n")
        return REFUSED
    except (VerificationFailed, StoreUnavailable, psycopg.Error, sqlite3.Error, OSError) as exc:
        sys.stderr.write(f"migrate failed: {exc}\n")
        return FAILED
    return OK
