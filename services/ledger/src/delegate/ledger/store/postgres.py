"""PostgreSQL backend: psycopg 3 async with a small connection pool.

A batch is one INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING RETURNING
(one round trip for the events), then the conversation/span upserts, in one
transaction. Writers take a transaction-scoped advisory lock first: with two
ledger processes (a hot standby, a rolling deploy), bigserial values could
otherwise commit out of order, and a reader polling "seq > N" would skip the
one that committed late. Durability is PostgreSQL's own (synchronous_commit=on).
"""

import logging
from collections.abc import Callable, Collection, Sequence
from typing import Any

import psycopg
import psycopg_pool
from psycopg.rows import TupleRow

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
    judge_fences,
    migrations,
    narrowing,
    stored,
    summarize,
    term_changes,
    unique_by_id,
)

log = logging.getLogger(__name__)

# payload as text: it is spliced into replies verbatim, never parsed on the way out.
COLS = "seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id, payload::text"
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
UPSERT_CONVERSATION = """
INSERT INTO conversations (id, opened_at, ended_at, last_event_at, last_seq) VALUES (%s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET
    opened_at = COALESCE(conversations.opened_at, excluded.opened_at),
    ended_at = COALESCE(conversations.ended_at, excluded.ended_at),
    last_event_at = GREATEST(conversations.last_event_at, excluded.last_event_at),
    last_seq = GREATEST(conversations.last_seq, excluded.last_seq)
"""
UPSERT_SPAN = """
INSERT INTO spans (id, conversation_id, type, opened_at, opened_seq, closed_at) VALUES (%s, %s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET
    conversation_id = COALESCE(spans.conversation_id, excluded.conversation_id),
    type = COALESCE(spans.type, excluded.type),
    opened_at = COALESCE(spans.opened_at, excluded.opened_at),
    opened_seq = COALESCE(spans.opened_seq, excluded.opened_seq),
    closed_at = COALESCE(spans.closed_at, excluded.closed_at)
"""
UPSERT_TERM = """
INSERT INTO terms (id, type, holder, started_at, started_seq, supersedes, ended_at, end_reason)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (id) DO UPDATE SET
    type = COALESCE(terms.type, excluded.type),
    holder = COALESCE(terms.holder, excluded.holder),
    started_at = COALESCE(terms.started_at, excluded.started_at),
    started_seq = COALESCE(terms.started_seq, excluded.started_seq),
    supersedes = COALESCE(terms.supersedes, excluded.supersedes),
    ended_at = COALESCE(terms.ended_at, excluded.ended_at),
    end_reason = CASE WHEN terms.ended_at IS NULL THEN excluded.end_reason ELSE terms.end_reason END
"""
CLOSE_TERM = "UPDATE terms SET ended_at = %s, end_reason = %s WHERE id = %s AND ended_at IS NULL"
UPSERT_ARTIFACT = """
INSERT INTO thoughtflow_artifacts (run_id, run_type, span_id, d2_path, svg_path, bytes, through_seq, error,
                                   created_at, event_id, seq)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (run_id) DO UPDATE SET
    run_type = excluded.run_type, span_id = excluded.span_id, d2_path = excluded.d2_path,
    svg_path = excluded.svg_path, bytes = excluded.bytes, through_seq = excluded.through_seq,
    error = excluded.error, created_at = excluded.created_at, event_id = excluded.event_id, seq = excluded.seq
WHERE excluded.through_seq >= thoughtflow_artifacts.through_seq
"""
RAISE_FENCE = (
    "INSERT INTO fences (singleton, token) VALUES (%s, %s)"
    " ON CONFLICT (singleton) DO UPDATE SET token = GREATEST(fences.token, excluded.token)"
)
UPSERT_STATE = (
    "INSERT INTO ledger_state (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)

# Errors about the connection or the server's state, not about our data: retry later.
UNAVAILABLE = (psycopg.OperationalError, psycopg.InterfaceError, psycopg_pool.PoolTimeout)


def _stored(row: TupleRow) -> StoredEvent:
    seq, event_id, ts, conv, span, kind, channel, role, parent, payload = row
    return StoredEvent(seq, event_id, ts, format_ts(ts), conv, span, kind, channel, role, parent, payload)


class PostgresStore(LedgerStore):
    backend = "postgres"

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

    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[TupleRow]:
        try:
            async with self._pool.connection() as conn:
                cur = await conn.execute(sql, params)
                return await cur.fetchall()
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"postgres: {exc}") from exc
        except psycopg.DataError as exc:  # NUL in text, a number out of range: the request's fault
            raise BadValue(f"a value the database cannot hold: {exc}") from exc

    async def _scan(
        self, sql: str, params: Sequence[Any], room: Room, offer: Callable[[TupleRow], bool] | None = None
    ) -> None:
        """Offer the rows of ``sql`` to ``room`` (or to ``offer``), in order, until one is refused.

        Through a server-side cursor, fetched in chunks sized to the room left: a reply that
        its byte budget cuts short has not first pulled every big payload up to its row
        limit over the wire. A page of small events takes two FETCHes.
        """
        take = offer or (lambda row: room.take(_stored(row)))
        try:
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
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"postgres: {exc}") from exc
        except psycopg.DataError as exc:
            raise BadValue(f"a value the database cannot hold: {exc}") from exc

    async def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[StoredEvent]:
        return [_stored(r) for r in await self._fetch(sql, params)]

    async def _events(self, sql: str, params: Sequence[Any] = ()) -> list[Event]:
        return [r.event() for r in await self._rows(sql, params)]

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
        try:
            return await self._append(list(rows), fences, announced_through)
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"postgres: {exc}") from exc

    async def _append(self, rows: list[Row], fences: Sequence[Fence | None] | None, announced: int | None) -> Written:
        async with self._pool.connection() as conn, conn.transaction():
            # The fences table is read and raised under this lock too: two ledgers agree on the mark.
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
            refused: list[tuple[int, str]] = []
            raised: dict[str, int] = {}
            if fences is not None and any(f is not None for f in fences):
                cur = await conn.execute("SELECT singleton, token FROM fences")
                marks = {singleton: int(token) for singleton, token in await cur.fetchall()}
                verdict = judge_fences(rows, fences, marks)
                if verdict.stale:
                    cur = await conn.execute(
                        "SELECT id FROM conversation_events WHERE id = ANY(%s)",
                        (list({rows[i][0] for i in verdict.stale}),),
                    )
                    # Stored already, or kept earlier in this very batch: a redelivery, no refusal.
                    there = {r[0] for r in await cur.fetchall()} | {rows[i][0] for i in verdict.kept}
                    refused = [(i, why) for i, why in verdict.stale.items() if rows[i][0] not in there]
                rows = [rows[i] for i in verdict.kept]
                raised = verdict.raised
            rows = unique_by_id(rows)
            columns: list[list[Any]] = [list(column) for column in zip(*rows, strict=True)] if rows else []
            committed: list[StoredEvent] = []
            if rows:
                cur = await conn.execute(INSERT_EVENTS, columns)
                by_id = {row[0]: row for row in rows}
                committed = [stored(by_id[event_id], seq) for seq, event_id in sorted(await cur.fetchall())]
            summary = summarize(committed)
            async with conn.cursor() as cur:
                if summary.conversations:
                    await cur.executemany(
                        UPSERT_CONVERSATION,
                        [(c.id, c.opened_at, c.ended_at, c.last_event_at, c.last_seq) for c in summary.conversations],
                    )
                if summary.spans:
                    await cur.executemany(
                        UPSERT_SPAN,
                        [(s.id, s.conversation_id, s.type, s.opened_at, s.opened_seq, s.closed_at)
                         for s in summary.spans],
                    )
                await _write_terms(cur, term_changes(committed))
                await _write_artifacts(cur, artifact_changes(committed))
                await _write_usage(cur, usage.usage_changes(committed))
                if raised:
                    await cur.executemany(RAISE_FENCE, list(raised.items()))
                if announced is not None:
                    await cur.execute(UPSERT_STATE, (ANNOUNCED, announced))
        return Written(committed, refused)

    # ---- reads ------------------------------------------------------------------------

    async def _open_term(self, term_type: str) -> TermInfo | None:
        rows = await self._fetch(
            "SELECT id, type, holder, started_at, started_seq, supersedes FROM terms"
            " WHERE type = %s AND ended_at IS NULL AND started_seq IS NOT NULL ORDER BY started_seq DESC LIMIT 1",
            (term_type,),
        )
        if not rows:
            return None
        term_id, kind, holder, started_at, started_seq, supersedes = rows[0]
        return TermInfo(
            id=term_id, type=kind, holder=holder, started_at=started_at, started_seq=started_seq,
            supersedes=supersedes,
        )

    async def fence_marks(self) -> dict[str, int]:
        return {singleton: int(token) for singleton, token in await self._fetch("SELECT singleton, token FROM fences")}

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
            mark="%s",
        )
        if kinds is not None:
            where.append("kind = ANY(%s)")
            params.append(list(kinds))
        params.append(limit + 1)
        # One statement, one snapshot: the rows and last_seq agree.
        sql = (
            f"SELECT {COLS}, (SELECT COALESCE(MAX(seq), 0) FROM conversation_events) AS last_seq"
            f" FROM conversation_events WHERE {' AND '.join(where)} ORDER BY seq LIMIT %s"
        )
        room = Room(limit, max_bytes, first=True)
        last: list[int] = []

        def offer(row: TupleRow) -> bool:
            if not last:
                last.append(int(row[-1]))
            return room.take(_stored(row[:-1]))

        await self._scan(sql, params, room, offer)
        if not last:
            return QueryResult([], False, await self.last_seq())
        return QueryResult(room.rows, room.more, last[0])

    async def get(self, *, event_id: str | None = None, client_msg_id: str | None = None) -> Event | None:
        if event_id is not None:
            found = await self._events(f"SELECT {COLS} FROM conversation_events WHERE id = %s", (event_id,))
            if found:
                return found[0]
        if client_msg_id is not None:
            found = await self._events(
                f"SELECT {COLS} FROM conversation_events WHERE client_msg_id = %s ORDER BY seq LIMIT 1",
                (client_msg_id,),
            )
            if found:
                return found[0]
        return None

    async def usage(self, req: UsageRequest) -> UsageReply:
        q = usage.plan(req)
        try:
            async with self._pool.connection() as conn:
                grouped = await (await conn.execute(usage.pg(q.grouped), q.grouped_params)).fetchall()
                unpriced = await (await conn.execute(usage.pg(q.unpriced), q.unpriced_params)).fetchall()
                top = await (await conn.execute(usage.pg(q.top), q.top_params)).fetchall()
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"postgres: {exc}") from exc
        return usage.answer(req, grouped, unpriced, top)

    async def artifact(self, run_id: str) -> StoredEvent | None:
        found = await self._rows(
            f"SELECT {COLS} FROM conversation_events"
            " WHERE seq = (SELECT seq FROM thoughtflow_artifacts WHERE run_id = %s)",
            (run_id,),
        )
        return found[0] if found else None

    async def last_seq(self) -> int:
        rows = await self._fetch("SELECT COALESCE(MAX(seq), 0) FROM conversation_events")
        return int(rows[0][0])

    async def announced_seq(self) -> int:
        rows = await self._fetch("SELECT COALESCE(MAX(value), 0) FROM ledger_state WHERE key = %s", (ANNOUNCED,))
        return int(rows[0][0])

    # ---- primitives -------------------------------------------------------------------

    async def _older(self, before: Key | None, room: Room) -> list[StoredEvent]:
        if before is None:
            await self._scan(
                f"SELECT {COLS} FROM conversation_events ORDER BY ts DESC, id DESC LIMIT %s", (room.limit + 1,), room
            )
        else:
            await self._scan(
                f"SELECT {COLS} FROM conversation_events WHERE (ts, id) < (%s, %s) ORDER BY ts DESC, id DESC LIMIT %s",
                (before[0], before[1], room.limit + 1), room,
            )
        return room.rows

    async def _between(self, low: Key, high: Key, room: Room) -> list[StoredEvent]:
        await self._scan(
            f"SELECT {COLS} FROM conversation_events WHERE (ts, id) >= (%s, %s) AND (ts, id) < (%s, %s)"
            " ORDER BY ts DESC, id DESC LIMIT %s",
            (low[0], low[1], high[0], high[1], room.limit + 1), room,
        )
        return room.rows

    async def _span_starts(self, span_ids: Collection[str]) -> dict[str, Key]:
        # One round trip for every span: a LATERAL index seek per id.
        rows = await self._fetch(
            "SELECT s.span_id, f.ts, f.id FROM unnest(%s::text[]) AS s(span_id) CROSS JOIN LATERAL ("
            " SELECT ts, id FROM conversation_events WHERE span_id = s.span_id ORDER BY ts, id LIMIT 1) AS f",
            (list(span_ids),),
        )
        return {span: (ts, event_id) for span, ts, event_id in rows}

    async def _has_older(self, key: Key) -> bool:
        rows = await self._fetch(
            "SELECT EXISTS (SELECT 1 FROM conversation_events WHERE (ts, id) < (%s, %s))", (key[0], key[1])
        )
        return bool(rows[0][0])

    async def _newest_open_conversation(self) -> str | None:
        rows = await self._fetch("SELECT id FROM conversations WHERE ended_at IS NULL ORDER BY last_seq DESC LIMIT 1")
        return rows[0][0] if rows else None

    async def _open_span_event(self, conversation_id: str) -> Event | None:
        found = await self._events(
            f"SELECT {COLS} FROM conversation_events WHERE seq = ("
            " SELECT opened_seq FROM spans WHERE conversation_id = %s AND closed_at IS NULL"
            " AND opened_seq IS NOT NULL ORDER BY opened_seq DESC LIMIT 1)",
            (conversation_id,),
        )
        return found[0] if found else None

    async def _newest(self, conversation_id: str, kind: str, limit: int, role: str | None = None) -> list[Event]:
        if role is None:
            return await self._events(
                f"SELECT {COLS} FROM conversation_events WHERE conversation_id = %s AND kind = %s"
                " ORDER BY seq DESC LIMIT %s",
                (conversation_id, kind, limit),
            )
        return await self._events(
            f"SELECT {COLS} FROM conversation_events WHERE conversation_id = %s AND kind = %s AND role = %s"
            " ORDER BY seq DESC LIMIT %s",
            (conversation_id, kind, role, limit),
        )


async def _write_terms(cur: psycopg.AsyncCursor[TupleRow], changes: list[TermChange]) -> None:
    upserts = [
        (c.id, c.type, c.holder, c.started_at, c.started_seq, c.supersedes, c.ended_at, c.end_reason)
        for c in changes if not c.close_only
    ]
    closes = [(c.ended_at, c.end_reason, c.id) for c in changes if c.close_only]
    if upserts:
        await cur.executemany(UPSERT_TERM, upserts)
    if closes:
        await cur.executemany(CLOSE_TERM, closes)


async def _write_artifacts(cur: psycopg.AsyncCursor[TupleRow], changes: list[ArtifactChange]) -> None:
    if changes:
        await cur.executemany(
            UPSERT_ARTIFACT,
            [(c.run_id, c.run_type, c.span_id, c.d2_path, c.svg_path, c.bytes, c.through_seq, c.error,
              c.created_at, c.event_id, c.seq) for c in changes],
        )


async def _write_usage(cur: psycopg.AsyncCursor[TupleRow], changes: usage.UsageChanges) -> None:
    if changes.hours:
        await cur.executemany(usage.pg(usage.UPSERT_HOUR), changes.hours)
    if changes.spans:
        await cur.executemany(usage.pg(usage.UPSERT_SPAN), changes.spans)
