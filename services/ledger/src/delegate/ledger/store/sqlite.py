"""SQLite backend: the stdlib ``sqlite3`` driven from two dedicated threads.

Why not aiosqlite: it is the same thing (sqlite3 in a thread) but hops to the
thread once per statement, and coroutines sharing its connection can interleave
statements inside one another's transaction. Here a batch is one transaction
under a lock: COMMIT (which waits for the fsync) runs on the writer thread, and so
does BEGIN IMMEDIATE when it would have to wait for another connection's lock
(tried on the event loop first, without waiting: it normally gets the lock at once);
the statements between them (insert, new seqs, conversations and spans) run on the
event loop in one go, without a yield, so nothing interleaves with them and no
statement hands the GIL back and forth (a big batch runs them on the writer thread
instead). Reads run on a second thread with their own connection: under WAL they
never wait for a commit's fsync. sqlite3 releases the GIL while SQLite works, so
the event loop keeps serving meanwhile.

Durability: ``synchronous=FULL``. In WAL mode NORMAL syncs only at checkpoints,
so a commit that was acked could vanish on power loss (it survives a process
crash either way); FULL fsyncs the WAL on every commit, which is what "an event
the ledger acked survives power loss" needs. One fsync per batch, not per event.
"""

import asyncio
import contextlib
import logging
import os
import sqlite3
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import cache
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts.events import Event, Fence
from delegate.contracts.ids import format_ts
from delegate.contracts.messages import TermInfo
from delegate.contracts.usage import UsageReply, UsageRequest

from . import usage
from .base import (
    ANNOUNCED,
    ArtifactChange,
    BadValue,
    Key,
    LedgerStore,
    QueryResult,
    Room,
    Row,
    StoredEvent,
    StoreUnavailable,
    TermChange,
    Written,
    artifact_changes,
    insert_params,
    judge_fences,
    migrations,
    narrowing,
    stored,
    summarize,
    term_changes,
    unique_by_id,
)

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
COLS = "seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id, payload"

INSERT_EVENT_HEAD = (
    "INSERT INTO conversation_events (id, ts, conversation_id, span_id, kind, channel, role, parent_id,"
    " client_msg_id, payload)"
)
INSERT_EVENT = f"{INSERT_EVENT_HEAD} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
MULTI_ROW_MAX = 256  # rows per INSERT statement: 2,560 parameters, well under SQLite's 32,766
INLINE_WRITE_MAX = 512 * 1024  # payload bytes a batch may have for its statements to run on the event loop
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
UPSERT_TERM = """
INSERT INTO terms (id, type, holder, started_at, started_seq, supersedes, ended_at, end_reason)
VALUES (?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    type = COALESCE(terms.type, excluded.type),
    holder = COALESCE(terms.holder, excluded.holder),
    started_at = COALESCE(terms.started_at, excluded.started_at),
    started_seq = COALESCE(terms.started_seq, excluded.started_seq),
    supersedes = COALESCE(terms.supersedes, excluded.supersedes),
    ended_at = COALESCE(terms.ended_at, excluded.ended_at),
    end_reason = CASE WHEN terms.ended_at IS NULL THEN excluded.end_reason ELSE terms.end_reason END
"""
CLOSE_TERM = "UPDATE terms SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL"
UPSERT_ARTIFACT = """
INSERT INTO thoughtflow_artifacts (run_id, run_type, span_id, d2_path, svg_path, bytes, through_seq, error,
                                   created_at, event_id, seq)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (run_id) DO UPDATE SET
    run_type = excluded.run_type, span_id = excluded.span_id, d2_path = excluded.d2_path,
    svg_path = excluded.svg_path, bytes = excluded.bytes, through_seq = excluded.through_seq,
    error = excluded.error, created_at = excluded.created_at, event_id = excluded.event_id, seq = excluded.seq
WHERE excluded.through_seq >= thoughtflow_artifacts.through_seq
"""
RAISE_FENCE = (
    "INSERT INTO fences (singleton, token) VALUES (?, ?)"
    " ON CONFLICT (singleton) DO UPDATE SET token = MAX(fences.token, excluded.token)"
)
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


def make_private(path: Path) -> None:
    """The database's folder 0700 and its files 0600, like the token file: they hold every word
    ever said. The file is created here, before SQLite opens it, because SQLite creates its
    -wal, -shm and -journal files with the database file's mode; an older install's files
    are narrowed too."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        os.chmod(path.parent, 0o700)
        os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
        for suffix in ("", "-wal", "-shm", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{path}{suffix}", 0o600)
    except PermissionError as exc:  # a folder we do not own (a mounted volume): its owner decides
        log.warning("cannot make %s private: %s", path, exc)


DATA_ERRORS = (sqlite3.IntegrityError, sqlite3.DataError, sqlite3.ProgrammingError, sqlite3.InterfaceError)


@contextlib.contextmanager
def _database_errors() -> Iterator[None]:
    """A database that is locked, busy, failing or gone becomes ``StoreUnavailable``."""
    try:
        yield
    except DATA_ERRORS:
        raise  # about the data, not the database: retrying the same events would fail again
    except sqlite3.DatabaseError as exc:  # locked, busy, I/O, disk full, cannot open
        raise StoreUnavailable(f"sqlite: {exc}") from exc


# What binding a request's value can raise: OverflowError for an int past SQLite's 64 bits.
BAD_VALUES = (OverflowError, sqlite3.DataError, sqlite3.InterfaceError)


class _Thread:
    """One thread owning one connection; every call runs there, in order."""

    def __init__(self, name: str, connect: Callable[[], sqlite3.Connection], *, reads: bool = False) -> None:
        self._name = name
        self._reads = reads  # a value a read cannot bind is the request's fault: BadValue
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
        with _database_errors():
            try:
                return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn, args)
            except BAD_VALUES as exc:
                if self._reads:
                    raise BadValue(f"a value the database cannot hold: {exc}") from exc
                raise

    def submit(self, fn: Callable[[sqlite3.Connection], object]) -> None:
        """Queue ``fn`` behind every call already made, without waiting for it."""
        if self._pool is not None:
            self._pool.submit(self._run, fn, ())

    async def connection(self) -> sqlite3.Connection:
        """The connection itself, for statements run between two calls (see ``SqliteStore._append``)."""
        if self._conn is None:
            await self.call(lambda conn: None)
        assert self._conn is not None
        return self._conn

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
            reads=True,
        )
        self._write_lock = asyncio.Lock()  # one transaction at a time on the writer connection
        # Nothing queued on the writer thread: the connection may be used here. False after a
        # failed or cancelled transaction, whose ROLLBACK (and perhaps COMMIT) may still be there.
        self._settled = False

    async def open(self) -> None:
        make_private(self.path)
        version = await self._writer.call(migrate)
        await self._reader.call(lambda conn: conn.execute("SELECT 1").fetchone())
        log.info("sqlite ledger at %s (journal %s, synchronous %s, schema v%d)",
                 self.path, self.journal_mode, self.synchronous, version)

    async def close(self) -> None:
        await self._reader.close()
        await self._writer.close()

    # ---- write ------------------------------------------------------------------------

    async def write(
        self,
        rows: Sequence[Row],
        *,
        fences: Sequence[Fence | None] | None = None,
        announced_through: int | None = None,
    ) -> Written:
        if not rows and announced_through is None:
            return Written()
        async with self._write_lock:
            return await self._append(list(rows), fences, announced_through)

    async def _append(self, rows: list[Row], fences: Sequence[Fence | None] | None, announced: int | None) -> Written:
        """One transaction: COMMIT on the writer thread, BEGIN and the statements here.

        COMMIT waits for the fsync, on the writer thread, so the event loop never does.
        BEGIN IMMEDIATE is tried here without waiting (``_begin_now``), and only when another
        connection holds the lock does it wait, on the writer thread: a hop there and back
        costs a wait for the GIL and a core, each time (measured: ~0.1-1 ms a batch on 2 busy
        cores). The statements in between run right here on the event loop, without a yield,
        so nothing interleaves with them: on the writer thread every one of them would let
        go of the GIL and then wait to get it back from a busy event loop (measured: ~12%
        of the drain rate).
        """
        conn = await self._writer.connection()
        settled, self._settled = self._settled, False  # until this transaction has ended well
        try:
            with _database_errors():
                began = settled and _begin_now(conn)
            if not began:
                await self._writer.call(_begin)  # behind whatever the thread still holds
            if sum(len(row[-1]) for row in rows) <= INLINE_WRITE_MAX:
                with _database_errors():
                    written = _write(conn, rows, fences, announced)
            else:  # big events: not worth stalling the event loop for (nor SQLite's cache spilling)
                written = await self._writer.call(_write, rows, fences, announced)
            await self._writer.call(_commit)
        except BaseException:
            # Queued behind the BEGIN or COMMIT on the writer thread, should one still be running
            # (we were cancelled): the next transaction never starts inside this one.
            self._writer.submit(_rollback)
            raise
        self._settled = True
        return written

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
        max_bytes: int | None = None,
    ) -> QueryResult:
        where, params = narrowing(
            after_seq=after_seq, through_seq=through_seq, conversation_id=conversation_id, span_id=span_id,
            mark="?",
        )
        if kinds is not None:
            kinds = list(kinds)
            if not kinds:
                return QueryResult([], False, await self.last_seq())
            where.append(f"kind IN ({', '.join('?' * len(kinds))})")
            params.extend(kinds)
        sql = f"SELECT {COLS} FROM conversation_events WHERE {' AND '.join(where)} ORDER BY seq LIMIT ?"
        params.append(limit + 1)

        room = Room(limit, max_bytes, first=True)

        def run(conn: sqlite3.Connection) -> QueryResult:
            conn.execute("BEGIN")  # one snapshot for the rows and last_seq
            try:
                _take(conn, sql, params, room)
                last = conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return QueryResult(room.rows, room.more, int(last))

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

    async def artifact(self, run_id: str) -> StoredEvent | None:
        sql = (
            f"SELECT {COLS} FROM conversation_events"
            " WHERE seq = (SELECT seq FROM thoughtflow_artifacts WHERE run_id = ?)"
        )
        found = await self._reader.call(_events, sql, (run_id,))
        return found[0] if found else None

    async def usage(self, req: UsageRequest) -> UsageReply:
        q = usage.plan(req)

        def run(conn: sqlite3.Connection) -> UsageReply:
            return usage.answer(
                req, conn.execute(q.grouped, q.grouped_params).fetchall(),
                conn.execute(q.unpriced, q.unpriced_params).fetchall(), conn.execute(q.top, q.top_params).fetchall(),
            )

        return await self._reader.call(run)

    async def last_seq(self) -> int:
        return await self._reader.call(_scalar, "SELECT COALESCE(MAX(seq), 0) FROM conversation_events", ())

    async def announced_seq(self) -> int:
        return await self._reader.call(
            _scalar, "SELECT COALESCE(MAX(value), 0) FROM ledger_state WHERE key = ?", (ANNOUNCED,)
        )

    # ---- primitives -------------------------------------------------------------------

    async def _older(self, before: Key | None, room: Room) -> list[StoredEvent]:
        if before is None:
            sql = f"SELECT {COLS} FROM conversation_events ORDER BY ts DESC, id DESC LIMIT ?"
            return await self._reader.call(_take, sql, (room.limit + 1,), room)
        sql = f"SELECT {COLS} FROM conversation_events WHERE (ts, id) < (?, ?) ORDER BY ts DESC, id DESC LIMIT ?"
        return await self._reader.call(_take, sql, (format_ts(before[0]), before[1], room.limit + 1), room)

    async def _between(self, low: Key, high: Key, room: Room) -> list[StoredEvent]:
        sql = (
            f"SELECT {COLS} FROM conversation_events WHERE (ts, id) >= (?, ?) AND (ts, id) < (?, ?)"
            " ORDER BY ts DESC, id DESC LIMIT ?"
        )
        params = (format_ts(low[0]), low[1], format_ts(high[0]), high[1], room.limit + 1)
        return await self._reader.call(_take, sql, params, room)

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

    async def _open_term(self, term_type: str) -> TermInfo | None:
        def run(conn: sqlite3.Connection) -> TermInfo | None:
            row = conn.execute(
                "SELECT id, type, holder, started_at, started_seq, supersedes FROM terms"
                " WHERE type = ? AND ended_at IS NULL AND started_seq IS NOT NULL"
                " ORDER BY started_seq DESC LIMIT 1",
                (term_type,),
            ).fetchone()
            if row is None:
                return None
            term_id, kind, holder, started_at, started_seq, supersedes = row
            return TermInfo(
                id=term_id, type=kind, holder=holder, started_at=datetime.fromisoformat(started_at),
                started_seq=started_seq, supersedes=supersedes,
            )

        return await self._reader.call(run)

    async def fence_marks(self) -> dict[str, int]:
        def run(conn: sqlite3.Connection) -> dict[str, int]:
            return {singleton: int(token) for singleton, token in conn.execute("SELECT singleton, token FROM fences")}

        return await self._reader.call(run)


def _events(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[StoredEvent]:
    return [_stored(r) for r in conn.execute(sql, params).fetchall()]


def _take(conn: sqlite3.Connection, sql: str, params: Sequence[Any], room: Room) -> list[StoredEvent]:
    """Step through the rows while ``room`` takes them: SQLite reads no row past the first refused."""
    cur = conn.execute(sql, params)
    try:
        for row in cur:
            if not room.take(_stored(row)):
                break
    finally:
        cur.close()  # done with the statement before the snapshot's COMMIT
    return room.rows


def _scalar(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> int:
    return int(conn.execute(sql, params).fetchone()[0])


def _begin(conn: sqlite3.Connection) -> None:
    conn.execute("BEGIN IMMEDIATE")


def _begin_now(conn: sqlite3.Connection) -> bool:
    """BEGIN IMMEDIATE if the write lock is free right now; False (nothing begun) if it is not."""
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError:  # busy, locked (or failing: _begin will say so, after its wait)
        return False
    finally:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return True


def _commit(conn: sqlite3.Connection) -> None:
    conn.execute("COMMIT")


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def _write(
    conn: sqlite3.Connection, rows: list[Row], fences: Sequence[Fence | None] | None, announced: int | None
) -> Written:
    """The statements of one append (``rows`` from ``insert_params``), in the transaction ``_append`` opened."""
    refused: list[tuple[int, str]] = []
    raised: dict[str, int] = {}
    if fences is not None and any(f is not None for f in fences):
        marks = {singleton: int(token) for singleton, token in conn.execute("SELECT singleton, token FROM fences")}
        verdict = judge_fences(rows, fences, marks)
        if verdict.stale:
            stale_ids = list({rows[i][0] for i in verdict.stale})
            there = {
                r[0] for r in conn.execute(
                    f"SELECT id FROM conversation_events WHERE id IN ({', '.join('?' * len(stale_ids))})", stale_ids
                )
            }
            there |= {rows[i][0] for i in verdict.kept}  # kept earlier in this very batch: a redelivery too
            refused = [(i, why) for i, why in verdict.stale.items() if rows[i][0] not in there]
        rows = [rows[i] for i in verdict.kept]
        raised = verdict.raised
    rows = unique_by_id(rows)
    # The only writer holds the write lock, so exactly the rows above the old maximum are
    # ours. When all n rows went in and the maximum grew by exactly n, they hold seqs
    # before+1 … before+n in insert order: no need to read them back (two index probes).
    before = _max_seq(conn)
    inserted = _insert_events(conn, rows)
    if inserted == len(rows) and _max_seq(conn) == before + inserted:
        committed = [stored(row, seq) for seq, row in zip(count(before + 1), rows, strict=False)]
    else:  # some were stored already (a redelivery): read back which rows are new
        by_id = {row[0]: row for row in rows}
        new = conn.execute(
            "SELECT seq, id FROM conversation_events WHERE seq > ? ORDER BY seq", (before,)
        ).fetchall()
        committed = [stored(by_id[event_id], seq) for seq, event_id in new]
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
    _write_terms(conn, term_changes(committed))
    _write_artifacts(conn, artifact_changes(committed))
    _write_usage(conn, usage.usage_changes(committed))
    if raised:
        conn.executemany(RAISE_FENCE, list(raised.items()))
    if announced is not None:
        conn.execute(UPSERT_STATE, (ANNOUNCED, announced))
    return Written(committed, refused)


def _write_terms(conn: sqlite3.Connection, changes: list[TermChange]) -> None:
    if not changes:
        return
    conn.executemany(
        UPSERT_TERM,
        [(c.id, c.type, c.holder, _ts(c.started_at), c.started_seq, c.supersedes, _ts(c.ended_at), c.end_reason)
         for c in changes if not c.close_only],
    )
    conn.executemany(CLOSE_TERM, [(_ts(c.ended_at), c.end_reason, c.id) for c in changes if c.close_only])


def _write_artifacts(conn: sqlite3.Connection, changes: list[ArtifactChange]) -> None:
    if changes:
        conn.executemany(
            UPSERT_ARTIFACT,
            [(c.run_id, c.run_type, c.span_id, c.d2_path, c.svg_path, c.bytes, c.through_seq, c.error,
              _ts(c.created_at), c.event_id, c.seq) for c in changes],
        )


def _write_usage(conn: sqlite3.Connection, changes: usage.UsageChanges) -> None:
    if changes.hours:
        conn.executemany(usage.UPSERT_HOUR, changes.hours)
    if changes.spans:
        conn.executemany(usage.UPSERT_SPAN, changes.spans)


def _max_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0])


def _insert_events(conn: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> int:
    """Insert in multi-row statements of 256, 128, … 1 rows; returns how many rows went in.

    One statement per chunk, not one per row (executemany): sqlite3 lets go of the GIL
    for every statement step, and on a busy event loop each time costs a wait to get it
    back. Power-of-two chunks keep the set of statement texts (and prepared statements) small.
    """
    inserted = 0
    i = 0
    while i < len(rows):
        size = MULTI_ROW_MAX
        while size > len(rows) - i:
            size //= 2
        chunk = rows[i : i + size]
        inserted += conn.execute(_multi_row_insert(size), [value for row in chunk for value in row]).rowcount
        i += size
    return inserted


@cache
def _multi_row_insert(size: int) -> str:
    values = ", ".join(["(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"] * size)
    return f"{INSERT_EVENT_HEAD} VALUES {values} ON CONFLICT (id) DO NOTHING"
