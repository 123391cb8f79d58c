"""PostgreSQL backend: psycopg 3 async with a small connection pool.

A batch is one INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING
(one round trip for the events), then the conversation/span upserts, in one
transaction. Writers take a transaction-scoped advisory lock first: with two
ledger processes (a hot standby, a rolling deploy), bigserial values could
otherwise commit out of order, and a reader polling "seq > N" would skip the
one that committed late. Durability is PostgreSQL's own (synchronous_commit=on).
"""

import logging
from collections.abc import Collection, Sequence
from typing import Any

import psycopg
import psycopg_pool

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
    StoreUnavailable,
    Written,
    migrations,
    stored,
    unique_by_id,
)
from .commit_rules import judge_fences, refusals
from .dialect import Dialect
from .sql import Offer, SqlStore
from .statements import Statements

log = logging.getLogger(__name__)

APPEND_LOCK = 0x6C65646765720001  # "ledger" + 1: serializes writers, so seq order is commit order
MIGRATE_LOCK = 0x6C65646765720002
# Rows in a scan's first FETCH, before their sizes tell how many more fit a reply: at most
# 4 MB read for nothing should they all be 256 KiB events and only four fit.
SCAN_FIRST_ROWS = 16

INSERT_EVENTS = """
INSERT INTO conversation_events (id, ts, conversation_id, span_id, kind, channel, role, parent_id,
                                 client_msg_id, payload)
SELECT id, ts::timestamptz, conversation_id, span_id, kind, channel, role, parent_id, client_msg_id, payload::json
FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
            %s::text[], %s::text[], %s::text[])
     WITH ORDINALITY AS t(id, ts, conversation_id, span_id, kind, channel, role, parent_id, client_msg_id,
                          payload, ord)
ORDER BY ord
ON CONFLICT (id) DO NOTHING
RETURNING seq, id
"""

# Errors about the connection or the server's state, not about our data: retry later.
UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)


def _stored(row: Sequence[Any]) -> StoredEvent:
    seq, event_id, ts, conv, span, kind, channel, role, parent, payload = row
    return StoredEvent(seq, event_id, ts, format_ts(ts), conv, span, kind, channel, role, parent, payload)


DIALECT = Dialect(
    name="postgres",
    mark="%s",
    greatest="GREATEST",
    payload="payload::text",  # spliced into replies verbatim, never parsed on the way out
    bind_ts=lambda ts: ts,
    read_ts=lambda ts: ts,
    stored=_stored,
    any_of_array=True,
    unavailable=UNAVAILABLE,
    data_errors=(),
    bad_values=(psycopg.DataError,),  # NUL in text, a number out of range: the request's fault
)
SQL = Statements(DIALECT)
COLS = SQL.cols


class PostgresStore(SqlStore):
    backend = "postgres"
    sql = SQL

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 4) -> None:
        self.url = url
        self.min_size = min_size
        self.max_size = max_size
        self._pool_or_none: psycopg_pool.AsyncConnectionPool | None = None

    @property
    def _pool(self) -> psycopg_pool.AsyncConnectionPool:
        if self._pool_or_none is None:
            raise StoreUnavailable("postgres: the store is not open")
        return self._pool_or_none

    async def open(self) -> None:
        if self._pool_or_none is None:
            self._pool_or_none = psycopg_pool.AsyncConnectionPool(
                self.url, min_size=self.min_size, max_size=self.max_size, open=False, timeout=10.0,
                # No "options" here: it would replace any the URL carries (e.g. a search_path).
                kwargs={"application_name": "delegate-ledger"},
            )
            await self._pool_or_none.open(wait=False)
        try:
            await self._pool.wait(timeout=15.0)  # retried by the caller while PostgreSQL starts
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"postgres: {exc}") from exc
        version = await self._migrate()
        log.info("postgres ledger (schema v%d)", version)

    async def close(self) -> None:
        if self._pool_or_none is not None:
            pool, self._pool_or_none = self._pool_or_none, None
            await pool.close()

    async def _migrate(self) -> int:
        known = migrations("postgres")
        async with self._pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                " applied_at TIMESTAMPTZ NOT NULL DEFAULT now())"
            )
            cur = await conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version")
            current = int((await cur.fetchone() or (0,))[0])
            if current > known[-1].version:
                raise RuntimeError(
                    f"the database is at schema v{current}; this ledger knows only up to v{known[-1].version}"
                )
            for m in known:
                if m.version > current:
                    await conn.execute(m.sql.encode())  # no parameters: several statements may run at once
                    await conn.execute(
                        "INSERT INTO schema_version (version, name) VALUES (%s, %s)", (m.version, m.name)
                    )
                    log.info("postgres schema migrated to v%d (%s)", m.version, m.name)
                    current = m.version
        return current

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        with DIALECT.errors(reads=True):
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return list(await cur.fetchall())

    async def _scan(self, sql: str, params: Sequence[Any], room: Room, offer: Offer | None = None) -> None:
        """Through a server-side cursor, fetched in chunks sized to the room left: a reply that
        its byte budget cuts short has not first pulled every big payload up to its row
        limit over the wire. A page of small events takes two FETCHes.
        """
        take = offer or (lambda row: room.take(_stored(row)))
        with DIALECT.errors(reads=True):
            async with (
                self._pool.connection() as conn,
                conn.transaction(),
                conn.cursor(name="ledger_scan") as cur,
            ):
                await cur.execute(sql, params)
                size = min(room.wanted(), SCAN_FIRST_ROWS)
                while True:
                    chunk = await cur.fetchmany(size)
                    for row in chunk:
                        if not take(row):
                            return
                    if len(chunk) < size:
                        return
                    size = room.wanted()

    # ---- write ------------------------------------------------------------------------

    async def _append(self, rows: list[Row], fences: Sequence[Fence | None] | None, announced: int | None) -> Written:
        with DIALECT.errors():
            async with self._pool.connection() as conn, conn.transaction():
                # The fences table is read and raised under this lock too: two ledgers agree on the mark.
                await conn.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
                refused: list[tuple[int, str]] = []
                raised: dict[str, int] = {}
                if fences is not None and any(f is not None for f in fences):
                    cur = await conn.execute(SQL.fence_marks)
                    marks = {singleton: int(token) for singleton, token in await cur.fetchall()}
                    verdict = judge_fences(rows, fences, marks)
                    if verdict.stale:
                        cur = await conn.execute(*SQL.stored_ids(rows, verdict))
                        refused = refusals(rows, verdict, {r[0] for r in await cur.fetchall()})
                    rows = [rows[i] for i in verdict.kept]
                    raised = verdict.raised
                rows = unique_by_id(rows)
                committed: list[StoredEvent] = []
                if rows:
                    cur = await conn.execute(INSERT_EVENTS, [list(column) for column in zip(*rows, strict=True)])
                    by_id = {row[0]: row for row in rows}
                    committed = [stored(by_id[event_id], seq) for seq, event_id in sorted(await cur.fetchall())]
                async with conn.cursor() as cur:
                    for sql, params in SQL.projections(committed, raised, announced):
                        await cur.executemany(sql, params)
            return Written(committed, refused)

    # ---- reads ------------------------------------------------------------------------

    snapshot_cols = f", ({SQL.last_seq}) AS last_seq"  # one statement, one snapshot: rows and last_seq agree

    async def _snapshot(self, sql: str, params: Sequence[Any], room: Room) -> QueryResult:
        last: list[int] = []

        def offer(row: Sequence[Any]) -> bool:
            if not last:
                last.append(int(row[-1]))
            return room.take(_stored(row[:-1]))

        await self._scan(sql, params, room, offer)
        if not last:
            return QueryResult([], False, await self.last_seq())
        return QueryResult(room.rows, room.more, last[0])

    async def usage(self, req: UsageRequest) -> UsageReply:
        q = usage.plan(req)
        with DIALECT.errors(reads=True):
            async with self._pool.connection() as conn, conn.transaction():
                # one snapshot (READ COMMITTED takes one a statement): the totals and the top calls agree
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                grouped = await (await conn.execute(DIALECT.sql(q.grouped), q.grouped_params)).fetchall()
                unpriced = await (await conn.execute(DIALECT.sql(q.unpriced), q.unpriced_params)).fetchall()
                top = await (await conn.execute(DIALECT.sql(q.top), q.top_params)).fetchall()
        return usage.answer(req, grouped, unpriced, top)

    # ---- primitives -------------------------------------------------------------------

    async def _span_starts(self, span_ids: Collection[str]) -> dict[str, Key]:
        # One round trip for every span, a LATERAL index seek per id (SQLite, in process, seeks one by one).
        rows = await self._fetch(
            "SELECT s.span_id, f.ts, f.id FROM unnest(%s::text[]) AS s(span_id) CROSS JOIN LATERAL ("
            " SELECT ts, id FROM conversation_events WHERE span_id = s.span_id ORDER BY ts, id LIMIT 1) AS f",
            (list(span_ids),),
        )
        return {span: (ts, event_id) for span, ts, event_id in rows}
