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
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import cache
from itertools import count
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts.events import Fence
from delegate.contracts.ids import format_ts
from delegate.contracts.usage import UsageReply, UsageRequest

from . import usage
from .base import (
    Key,
    QueryResult,
    Room,
    Row,
    StoredEvent,
    Written,
    insert_params,
    migrations,
    stored,
    unique_by_id,
)
from .commit_rules import judge_fences, refusals
from .dialect import Dialect
from .sql import Offer, SqlStore
from .statements import INSERT_EVENT_HEAD, Statements

log = logging.getLogger(__name__)

T = TypeVar("T")

BUSY_TIMEOUT_MS = 5000
INSERT_EVENT = f"{INSERT_EVENT_HEAD} VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING"
MULTI_ROW_MAX = 256  # rows per INSERT statement: 2,560 parameters, well under SQLite's 32,766
INLINE_WRITE_MAX = 512 * 1024  # payload bytes a batch may have for its statements to run on the event loop


def _stored(row: Sequence[Any]) -> StoredEvent:
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


DIALECT = Dialect(
    name="sqlite",
    mark="?",
    greatest="MAX",
    payload="payload",
    bind_ts=format_ts,  # timestamps are stored in their wire form, so text order is time order
    read_ts=datetime.fromisoformat,
    stored=_stored,
    any_of_array=False,
    unavailable=(sqlite3.DatabaseError,),  # locked, busy, I/O, disk full, cannot open
    data_errors=(sqlite3.IntegrityError, sqlite3.DataError, sqlite3.ProgrammingError, sqlite3.InterfaceError),
    # What binding a request's value can raise: OverflowError for an int past SQLite's 64 bits.
    bad_values=(OverflowError, sqlite3.DataError, sqlite3.InterfaceError),
)
SQL = Statements(DIALECT)
COLS = SQL.cols


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
        with DIALECT.errors(reads=self._reads):
            return await asyncio.get_running_loop().run_in_executor(self._pool, self._run, fn, args)

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


class SqliteStore(SqlStore):
    backend = "sqlite"
    sql = SQL

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
        async with self._write_lock:
            conn = await self._writer.connection()
            settled, self._settled = self._settled, False  # until this transaction has ended well
            try:
                with DIALECT.errors():
                    began = settled and _begin_now(conn)
                if not began:
                    await self._writer.call(_begin)  # behind whatever the thread still holds
                if sum(len(row[-1]) for row in rows) <= INLINE_WRITE_MAX:
                    with DIALECT.errors():
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

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        return await self._reader.call(_fetch, sql, params)

    async def _scan(self, sql: str, params: Sequence[Any], room: Room, offer: Offer | None = None) -> None:
        await self._reader.call(_take, sql, params, offer or (lambda row: room.take(_stored(row))))

    async def _snapshot(self, sql: str, params: Sequence[Any], room: Room) -> QueryResult:
        def run(conn: sqlite3.Connection) -> QueryResult:
            conn.execute("BEGIN")  # one snapshot for the rows and last_seq
            try:
                _take(conn, sql, params, lambda row: room.take(_stored(row)))
                last = conn.execute(SQL.last_seq).fetchone()[0]
            finally:
                conn.execute("COMMIT")
            return QueryResult(room.rows, room.more, int(last))

        return await self._reader.call(run)

    async def usage(self, req: UsageRequest) -> UsageReply:
        q = usage.plan(req)

        def run(conn: sqlite3.Connection) -> UsageReply:
            conn.execute("BEGIN")  # one snapshot: the totals and the top calls agree
            try:
                return usage.answer(
                    req, conn.execute(q.grouped, q.grouped_params).fetchall(),
                    conn.execute(q.unpriced, q.unpriced_params).fetchall(),
                    conn.execute(q.top, q.top_params).fetchall(),
                )
            finally:
                conn.execute("COMMIT")

        return await self._reader.call(run)

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


def _fetch(conn: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[Sequence[Any]]:
    return conn.execute(sql, params).fetchall()


def _take(conn: sqlite3.Connection, sql: str, params: Sequence[Any], take: Offer) -> None:
    """Step through the rows while ``take`` wants them: SQLite reads no row past the first refused."""
    cur = conn.execute(sql, params)
    try:
        for row in cur:
            if not take(row):
                break
    finally:
        cur.close()  # done with the statement before the snapshot's COMMIT


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
        marks = {singleton: int(token) for singleton, token in conn.execute(SQL.fence_marks)}
        verdict = judge_fences(rows, fences, marks)
        if verdict.stale:
            refused = refusals(rows, verdict, {r[0] for r in conn.execute(*SQL.stored_ids(rows, verdict))})
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
    for sql, params in SQL.projections(committed, raised, announced):
        conn.executemany(sql, params)
    return Written(committed, refused)


def _max_seq(conn: sqlite3.Connection) -> int:
    return int(conn.execute(SQL.last_seq).fetchone()[0])


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
