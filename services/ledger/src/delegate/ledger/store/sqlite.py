"""SQLite backend: the stdlib ``sqlite3`` driven from two dedicated threads.

Why not aiosqlite: it is the same thing (sqlite3 in a thread) but hops to the
thread once per statement, and coroutines sharing its connection can interleave
statements inside one another's transaction. Here a whole batch (BEGIN, insert,
read back the new seqs, update conversations and spans, COMMIT) is ONE call on
the writer thread, so a transaction can never be interleaved and costs one hop.
Reads run on a second thread with their own connection: under WAL they never
wait for a commit's fsync. sqlite3 releases the GIL while SQLite works, so the
event loop keeps serving meanwhile.

Durability: ``synchronous=FULL``. In WAL mode NORMAL syncs only at checkpoints,
so a commit that was acked could vanish on power loss (it survives a process
crash either way); FULL fsyncs the WAL on every commit, which is what "an event
the ledger acked survives power loss" needs. One fsync per batch, not per event.
"""

import asyncio
import logging
import sqlite3
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts.events import Event
from delegate.contracts.ids import format_ts

from .base import (
    ANNOUNCED,
    Key,
    LedgerStore,
    QueryResult,
    StoredEvent,
    StoreUnavailable,
    insert_params,
    migrations,
    stored,
    summarize,
    unique_by_id,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
COLS = "seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id, payload"

INSERT_EVENT = (
    "INSERT INTO conversation_events (id, ts, conversation_id, span_id, kind, channel, role, parent_id,"
    " client_msg_id, payload) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
)
UPSERT_CONVERSATION = """
INSERT INTO conversations (id, opened_at, ended_at, last_event_at, last_seq) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    opened_at = COALESCE(conversations.opened_at, excluded.opened_at),
    ended_at = COALESCE(conversations.ended_at, excluded.ended_at),
    last_event_at = MAX(conversations.last_event_at, excluded.last_event_at),
    last_seq = MAX(conversations.last_seq, excluded.last_seq)
"""
UPSERT_SPAN = """
INSERT INTO spans (id, conversation_id, type, opened_at, opened_seq, closed_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    conversation_id = COALESCE(spans.conversation_id, excluded.conversation_id),
    type = COALESCE(spans.type, excluded.type),
    opened_at = COALESCE(spans.opened_at, excluded.opened_at),
    opened_seq = COALESCE(spans.opened_seq, excluded.opened_seq),
    closed_at = COALESCE(spans.closed_at, excluded.closed_at)
"""
UPSERT_STATE = (
    "INSERT INTO ledger_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)


def _ts(value: datetime | None) -> str | None:
    return format_ts(value) if value is not None else None


def _stored(row: tuple[Any, ...]) -> StoredEvent:
    seq, event_id, ts, conv, span, kind, channel, role, parent, payload = row
    # ts is stored in its wire form already (format_ts), so it goes out as it came in.
    return StoredEvent(seq, event_id, datetime.fromisoformat(ts), ts, conv, span, kind, channel, role, parent, payload)


event_row = insert_params  # the benchmark's bulk loader inserts exactly what the ledger does


def connect(path: Path, *, journal_mode: str, synchronous: str = "FULL", readonly: bool = False) -> sqlite3.Connection:
    """A connection with our pragmas. The writer sets the journal mode; WAL persists in the file."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=BUSY_TIMEOUT_MS / 1000)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    if readonly:
        conn.execute("PRAGMA query_only = ON")
        conn.execute("PRAGMA cache_size = -32768")  # 32 MiB: keeps the timeline index's upper levels hot
    else:
        got = conn.execute(f"PRAGMA journal_mode = {journal_mode}").fetchone()[0]
        if str(got).upper() != journal_mode:
            log.warning("asked SQLite for journal_mode=%s, got %s", journal_mode, got)
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def migrate(conn: sqlite3.Connection) -> int:
    """Apply the numbered migrations this database lacks; returns the schema version."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version"
        " (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    known = migrations("sqlite")
    current = _schema_version(conn)
    if current > known[-1].version:
        raise RuntimeError(f"the database is at schema v{current}; this ledger knows only up to v{known[-1].version}")
    for m in known:
        if m.version <= current:
            continue
        stamp = format_ts(datetime.now(UTC))
        name = m.name.replace("'", "''")
        try:
            conn.executescript(
                f"BEGIN IMMEDIATE;\n{m.sql}\n"
                f"INSERT INTO schema_version VALUES ({m.version}, '{name}', '{stamp}');\nCOMMIT;"
            )
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if _schema_version(conn) >= m.version:  # another process applied it meanwhile
                continue
            raise
        log.info("sqlite schema migrated to v%d (%s)", m.version, m.name)
    return _schema_version(conn)


def _schema_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])


class _Thread:
    """One thread owning one connection; every call runs there, in order."""

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection]) -> None:
        self._name = name
        self._pool: ThreadPoolExecutor | None = None
        self._connect = connect
        self._conn: sqlite3.Connection | None = None

    def _run(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self._conn is None:
            self._conn = self._connect()
        return fn(self._conn, *args)

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._pool is None:  # started on first use, so a closed store can be opened again
            self._pool = ThreadPoolExecutor(1, thread_name_prefix=self._name)
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn, args)
        except (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # about the data, not the database: retrying the same events would fail again
        except sqlite3.DatabaseError as exc:  # locked, busy, I/O, disk full, cannot open
            raise StoreUnavailable(f"sqlite: {exc}") from exc

    async def close(self) -> None:
        def shut() -> None:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        await asyncio.get_running_loop().run_in_executor(pool, shut)
        pool.shutdown(wait=True)


class SqliteStore(LedgerStore):
    backend = "sqlite"

    def __init__(self, path: Path, *, journal_mode: str = "WAL", synchronous: str = "FULL") -> None:
        self.path = path
        self.journal_mode = journal_mode.upper()
        self.synchronous = synchronous.upper()
        self._writer = _Thread(
            "ledger-sqlite-writer", lambda: connect(path, journal_mode=self.journal_mode, synchronous=self.synchronous)
        )
        self._reader = _Thread(
            "ledger-sqlite-reader",
            lambda: connect(path, journal_mode=self.journal_mode, synchronous=self.synchronous, readonly=True),
        )

    async def open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        version = await self._writer.call(migrate)
        await self._reader.call(lambda conn: conn.execute("SELECT 1").fetchone())
        log.info("sqlite ledger at %s (journal %s, synchronous %s, schema v%d)",
                 self.path, self.journal_mode, self.synchronous, version)

    async def close(self) -> None:
        await self._reader.close()
        await self._writer.close()

    # ---- write ------------------------------------------------------------------------

    async def append(
        self, events: Sequence[Event], *, announced_through: int | None = None
    ) -> list[StoredEvent]:
        batch = unique_by_id(events)
        if not batch and announced_through is None:
            return []
        return await self._writer.call(_append, batch, announced_through)

    # ---- reads ------------------------------------------------------------------------

    async def query(
        self,
        *,
        after_seq: int = 0,
        through_seq: int | None = None,
        conversation_id: str | None = None,
        span_id: str | None = None,
        kinds: Collection[str] | None = None,
        limit: int = 500,
    ) -> QueryResult:
        where = ["seq > ?"]
        params: list[Any] = [after_seq]
        if through_seq is not None:
            where.append("seq <= ?")
            params.append(through_seq)
        if conversation_id is not None:
            where.append("conversation_id = ?")
            params.append(conversation_id)
        if span_id is not None:
            where.append("span_id = ?")
            params.append(span_id)
        if kinds is not None:
            kinds = list(kinds)
            if not kinds:
                return QueryResult([], False, await self.last_seq())
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        sql = f"SELECT {COLS} FROM conversation_events WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        params.append(limit + 1)

        def run(conn: sqlite3.Connection) -> QueryResult:
            conn.execute("BEGIN")  # one snapshot for the rows and last_seq
            try:
                rows = conn.execute(sql, params).fetchall()
                last = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return QueryResult([_stored(r) for r in rows[:limit]], len(rows) > limit, int(last))

        return await self._reader.call(run)

    async def get(self, *, event_id: str | None = None, client_msg_id: str | None = None) -> Event | None:
        def run(conn: sqlite3.Connection) -> Event | None:
            row = None
            if event_id is not None:
                row = conn.execute(f"SELECT {COLS} FROM conversation_events WHERE id = ?", (event_id,)).fetchone()
            if row is None and client_msg_id is not None:
                row = conn.execute(
                    f"SELECT {COLS} FROM conversation_events WHERE client_msg_id = ? ORDER BY seq LIMIT 1",
                    (client_msg_id,),
                ).fetchone()
            return _stored(row).event() if row else None

        return await self._reader.call(run)

    async def last_seq(self) -> int:
        return await self._reader.call(_scalar, "SELECT COALESCE(MAX(seq), 0) FROM conversation_events", ())

    async def announced_seq(self) -> int:
        return await self._reader.call(
            _scalar, "SELECT COALESCE(MAX(value), 0) FROM ledger_state WHERE key = ?", (ANNOUNCED,)
        )

    # ---- primitives -------------------------------------------------------------------

    async def _older(self, before: Key | None, limit: int) -> list[StoredEvent]:
        if before is None:
            sql = f"SELECT {COLS} FROM conversation_events ORDER BY ts DESC, id DESC LIMIT ?"
            return await self._reader.call(_events, sql, (limit,))
        sql = f"SELECT {COLS} FROM conversation_events WHERE (ts, id) < (?, ?) ORDER BY ts DESC, id DESC LIMIT ?"
        return await self._reader.call(_events, sql, (format_ts(before[0]), before[1], limit))

    async def _between(self, low: Key, high: Key, limit: int) -> list[StoredEvent]:
        sql = (
            f"SELECT {COLS} FROM conversation_events WHERE (ts, id) >= (?, ?) AND (ts, id) < (?, ?)"
            " ORDER BY ts DESC, id DESC LIMIT ?"
        )
        return await self._reader.call(_events, sql, (format_ts(low[0]), low[1], format_ts(high[0]), high[1], limit))

    async def _span_starts(self, span_ids: Collection[str]) -> dict[str, Key]:
        ids = list(span_ids)

        def run(conn: sqlite3.Connection) -> dict[str, Key]:
            out: dict[str, Key] = {}
            for span in ids:  # one index seek each; in-process, so no round trips to batch away
                row = conn.execute(
                    "SELECT ts, id FROM conversation_events WHERE span_id = ? ORDER BY ts, id LIMIT 1", (span,)
                ).fetchone()
                if row:
                    out[span] = (datetime.fromisoformat(row[0]), row[1])
            return out

        return await self._reader.call(run)

    async def _has_older(self, key: Key) -> bool:
        sql = "SELECT EXISTS (SELECT 1 FROM conversation_events WHERE (ts, id) < (?, ?))"
        return bool(await self._reader.call(_scalar, sql, (format_ts(key[0]), key[1])))

    async def _newest_open_conversation(self) -> str | None:
        def run(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT id FROM conversations WHERE ended_at IS NULL ORDER BY last_seq DESC LIMIT 1"
            ).fetchone()
            return row[0] if row else None

        return await self._reader.call(run)

    async def _open_span_event(self, conversation_id: str) -> Event | None:
        sql = (
            f"SELECT {COLS} FROM conversation_events WHERE seq = ("
            " SELECT opened_seq FROM spans WHERE conversation_id = ? AND closed_at IS NULL"
            " AND opened_seq IS NOT NULL ORDER BY opened_seq DESC LIMIT 1)"
        )
        found = await self._reader.call(_events, sql, (conversation_id,))
        return found[0].event() if found else None

    async def _newest(self, conversation_id: str, kind: str, limit: int, role: str | None = None) -> list[Event]:
        role_sql = " AND role = ?" if role is not None else ""
        sql = (
            f"SELECT {COLS} FROM conversation_events WHERE conversation_id = ? AND kind = ?{role_sql}"
            " ORDER BY seq DESC LIMIT ?"
        )
        params = (conversation_id, kind, *((role,) if role is not None else ()), limit)
        return [r.event() for r in await self._reader.call(_events, sql, params)]


def _events(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[StoredEvent]:
    return [_stored(r) for r in conn.execute(sql, params).fetchall()]


def _scalar(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def _append(conn: sqlite3.Connection, batch: list[Event], announced: int | None) -> list[StoredEvent]:
    rows = [insert_params(e) for e in batch]
    conn.execute("BEGIN IMMEDIATE")
    try:
        # The only writer holds the write lock, so exactly the rows above the old maximum are ours;
        # executemany cannot RETURNING, and this costs one index probe.
        before = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0]
        conn.executemany(INSERT_EVENT, rows)
        by_id = {e.id: (e, row) for e, row in zip(batch, rows, strict=True)}
        new = conn.execute("SELECT seq, id FROM conversation_events WHERE seq > ? ORDER BY seq", (before,)).fetchall()
        committed = [stored(*by_id[event_id], seq) for seq, event_id in new]
        summary = summarize(committed)
        if summary.conversations:
            conn.executemany(
                UPSERT_CONVERSATION,
                [(c.id, _ts(c.opened_at), _ts(c.ended_at), _ts(c.last_event_at), c.last_seq)
                 for c in summary.conversations],
            )
        if summary.spans:
            conn.executemany(
                UPSERT_SPAN,
                [(s.id, s.conversation_id, s.type, _ts(s.opened_at), s.opened_seq, _ts(s.closed_at))
                 for s in summary.spans],
            )
        if announced is not None:
            conn.execute(UPSERT_STATE, (ANNOUNCED, announced))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return committed
