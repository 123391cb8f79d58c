"""The ledger's SQL, written once for both backends and rendered by their ``Dialect``.

Only what truly differs stays in a backend: how the events themselves are inserted (SQLite:
multi-row INSERTs and the new seqs inferred; PostgreSQL: one ``unnest`` INSERT ... RETURNING),
how a transaction is locked, and how a snapshot is held.
"""

from collections.abc import Sequence
from typing import Any

from . import usage
from .base import ANNOUNCED, Narrowing, Row, StoredEvent, narrowing
from .commit_rules import FenceVerdict, artifact_changes, summarize, term_changes
from .dialect import Dialect

EVENT_COLUMNS = "seq, id, ts, conversation_id, span_id, kind, channel, role, parent_id"
INSERT_EVENT_HEAD = (
    "INSERT INTO conversation_events (id, ts, conversation_id, span_id, kind, channel, role, parent_id,"
    " client_msg_id, payload)"
)
UPSERT_CONVERSATION = """
INSERT INTO conversations (id, opened_at, ended_at, last_event_at, last_seq) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (id) DO UPDATE SET
    opened_at = COALESCE(conversations.opened_at, excluded.opened_at),
    ended_at = COALESCE(conversations.ended_at, excluded.ended_at),
    last_event_at = GREATEST(conversations.last_event_at, excluded.last_event_at),
    last_seq = GREATEST(conversations.last_seq, excluded.last_seq)
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
    " ON CONFLICT (singleton) DO UPDATE SET token = GREATEST(fences.token, excluded.token)"
)
UPSERT_STATE = (
    "INSERT INTO ledger_state (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value"
)
FENCE_MARKS = "SELECT singleton, token FROM fences"
LAST_SEQ = "SELECT COALESCE(MAX(seq), 0) FROM conversation_events"
ANNOUNCED_SEQ = "SELECT COALESCE(MAX(value), 0) FROM ledger_state WHERE key = ?"
HAS_OLDER = "SELECT EXISTS (SELECT 1 FROM conversation_events WHERE (ts, id) < (?, ?))"
NEWEST_OPEN_CONVERSATION = "SELECT id FROM conversations WHERE ended_at IS NULL ORDER BY last_seq DESC LIMIT 1"
OPEN_TERM = (
    "SELECT id, type, holder, started_at, started_seq, supersedes FROM terms"
    " WHERE type = ? AND ended_at IS NULL AND started_seq IS NOT NULL ORDER BY started_seq DESC LIMIT 1"
)
# The event statements, {cols} being the dialect's spelling of the event columns.
BY_ID = "SELECT {cols} FROM conversation_events WHERE id = ?"
BY_CLIENT_MSG_ID = "SELECT {cols} FROM conversation_events WHERE client_msg_id = ? ORDER BY seq LIMIT 1"
ARTIFACT = "SELECT {cols} FROM conversation_events WHERE seq = (SELECT seq FROM thoughtflow_artifacts WHERE run_id = ?)"
NEWEST = "SELECT {cols} FROM conversation_events ORDER BY ts DESC, id DESC LIMIT ?"
OLDER = "SELECT {cols} FROM conversation_events WHERE (ts, id) < (?, ?) ORDER BY ts DESC, id DESC LIMIT ?"
BETWEEN = (
    "SELECT {cols} FROM conversation_events WHERE (ts, id) >= (?, ?) AND (ts, id) < (?, ?)"
    " ORDER BY ts DESC, id DESC LIMIT ?"
)
OPEN_SPAN_EVENT = (
    "SELECT {cols} FROM conversation_events WHERE seq = ("
    " SELECT opened_seq FROM spans WHERE conversation_id = ? AND closed_at IS NULL"
    " AND opened_seq IS NOT NULL ORDER BY opened_seq DESC LIMIT 1)"
)
NEWEST_OF_KIND = (
    "SELECT {cols} FROM conversation_events WHERE conversation_id = ? AND kind = ?{role} ORDER BY seq DESC LIMIT ?"
)


class Statements:
    """Every shared statement in one dialect, rendered once when the backend module loads."""

    def __init__(self, d: Dialect) -> None:
        self.dialect = d
        self.cols = f"{EVENT_COLUMNS}, {d.payload}"

        def events(text: str, **extra: str) -> str:
            return d.sql(text.format(cols=self.cols, **extra))

        self.upsert_conversation = d.sql(UPSERT_CONVERSATION)
        self.upsert_span = d.sql(UPSERT_SPAN)
        self.upsert_term = d.sql(UPSERT_TERM)
        self.close_term = d.sql(CLOSE_TERM)
        self.upsert_artifact = d.sql(UPSERT_ARTIFACT)
        self.raise_fence = d.sql(RAISE_FENCE)
        self.upsert_state = d.sql(UPSERT_STATE)
        self.usage_hour = d.sql(usage.UPSERT_HOUR)
        self.usage_span = d.sql(usage.UPSERT_SPAN)
        self.fence_marks = FENCE_MARKS
        self.last_seq = LAST_SEQ
        self.announced_seq = d.sql(ANNOUNCED_SEQ)
        self.has_older = d.sql(HAS_OLDER)
        self.newest_open_conversation = NEWEST_OPEN_CONVERSATION
        self.open_term = d.sql(OPEN_TERM)
        self.by_id = events(BY_ID)
        self.by_client_msg_id = events(BY_CLIENT_MSG_ID)
        self.artifact = events(ARTIFACT)
        self.newest = events(NEWEST)
        self.older = events(OLDER)
        self.between = events(BETWEEN)
        self.open_span_event = events(OPEN_SPAN_EVENT)
        self.newest_of_kind = events(NEWEST_OF_KIND, role="")
        self.newest_of_kind_role = events(NEWEST_OF_KIND, role=" AND role = ?")

    def query(self, where: Narrowing, *, limit: int, extra_cols: str = "") -> tuple[str, list[Any]]:
        """``LedgerStore.query``'s statement (by seq, ``limit + 1`` rows: one more says ``more``)."""
        conditions, params = narrowing(
            after_seq=where.after_seq,
            through_seq=where.through_seq,
            conversation_id=where.conversation_id,
            span_id=where.span_id,
            mark=self.dialect.mark,
        )
        if where.kinds is not None:
            condition, values = self.dialect.any_of("kind", where.kinds)
            conditions.append(condition)
            params.extend(values)
        params.append(limit + 1)
        sql = (
            f"SELECT {self.cols}{extra_cols} FROM conversation_events WHERE {' AND '.join(conditions)}"
            f" ORDER BY seq LIMIT {self.dialect.mark}"
        )
        return sql, params

    def stored_ids(self, rows: Sequence[Row], verdict: FenceVerdict) -> tuple[str, list[Any]]:
        """Which of the stale rows' events are stored already (a redelivery is not refused)."""
        condition, params = self.dialect.any_of("id", list({rows[i][0] for i in verdict.stale}))
        return f"SELECT id FROM conversation_events WHERE {condition}", params

    def projections(
        self, committed: Sequence[StoredEvent], raised: dict[str, int], announced: int | None
    ) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """The upserts newly stored events make in the same transaction, each with its rows (never empty)."""
        ts = self.dialect.bind_ts_or_none
        summary = summarize(committed)
        terms = term_changes(committed)
        artifacts = artifact_changes(committed)
        used = usage.usage_changes(committed)
        batches: list[tuple[str, list[tuple[Any, ...]]]] = [
            (
                self.upsert_conversation,
                [
                    (c.id, ts(c.opened_at), ts(c.ended_at), ts(c.last_event_at), c.last_seq)
                    for c in summary.conversations
                ],
            ),
            (
                self.upsert_span,
                [
                    (s.id, s.conversation_id, s.type, ts(s.opened_at), s.opened_seq, ts(s.closed_at))
                    for s in summary.spans
                ],
            ),
            (
                self.upsert_term,
                [
                    (
                        c.id,
                        c.type,
                        c.holder,
                        ts(c.started_at),
                        c.started_seq,
                        c.supersedes,
                        ts(c.ended_at),
                        c.end_reason,
                    )
                    for c in terms
                    if not c.close_only
                ],
            ),
            (self.close_term, [(ts(c.ended_at), c.end_reason, c.id) for c in terms if c.close_only]),
            (
                self.upsert_artifact,
                [
                    (
                        c.run_id,
                        c.run_type,
                        c.span_id,
                        c.d2_path,
                        c.svg_path,
                        c.bytes,
                        c.through_seq,
                        c.error,
                        ts(c.created_at),
                        c.event_id,
                        c.seq,
                    )
                    for c in artifacts
                ],
            ),
            (self.usage_hour, used.hours),
            (self.usage_span, used.spans),
            (self.raise_fence, list(raised.items())),
            (self.upsert_state, [(ANNOUNCED, announced)] if announced is not None else []),
        ]
        return [(sql, params) for sql, params in batches if params]
