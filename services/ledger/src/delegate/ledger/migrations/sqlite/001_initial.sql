-- 001: the event ledger, its conversation and span summaries, and the writer's own state.

-- One row per event. seq is the commit order (AUTOINCREMENT: never reused, even after a
-- data reset, so a client's "after_seq" can never silently skip a new event).
CREATE TABLE conversation_events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    id              TEXT NOT NULL,
    ts              TEXT NOT NULL,  -- fixed-width ISO-8601 UTC with microseconds: text order is time order
    conversation_id TEXT,
    span_id         TEXT,
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    role            TEXT,
    parent_id       TEXT,
    client_msg_id   TEXT,           -- copied out of a message payload so a retried input is found by index
    payload         TEXT NOT NULL   -- JSON
);
-- Same indexes as postgres/001_initial.sql's: kept apart because each backend's migrations are whole
-- files in its own dialect, run as written (PostgreSQL's timeline index also INCLUDEs seq and span_id).
CREATE UNIQUE INDEX conversation_events_by_id ON conversation_events (id);
-- The timeline key; every index also holds the rowid (seq), so keyset scans need no OFFSET.
CREATE INDEX conversation_events_by_timeline ON conversation_events (ts, id);
CREATE INDEX conversation_events_by_span ON conversation_events (span_id, ts, id) WHERE span_id IS NOT NULL;
CREATE INDEX conversation_events_by_conversation_kind
    ON conversation_events (conversation_id, kind, seq) WHERE conversation_id IS NOT NULL;
CREATE INDEX conversation_events_by_client_msg_id
    ON conversation_events (client_msg_id) WHERE client_msg_id IS NOT NULL;

-- Kept in the same transaction as the events, so resume never scans the ledger.
CREATE TABLE conversations (
    id            TEXT PRIMARY KEY,
    opened_at     TEXT,
    ended_at      TEXT,
    last_event_at TEXT NOT NULL,
    last_seq      INTEGER NOT NULL
);
CREATE INDEX conversations_open_by_activity ON conversations (last_seq) WHERE ended_at IS NULL;

CREATE TABLE spans (
    id              TEXT PRIMARY KEY,
    conversation_id TEXT,
    type            TEXT,
    opened_at       TEXT,
    opened_seq      INTEGER,  -- the span.opened event
    closed_at       TEXT
);
CREATE INDEX spans_by_conversation ON spans (conversation_id, opened_seq);

-- The writer's own bookkeeping, e.g. the newest seq it has announced on ledger.live.committed.
CREATE TABLE ledger_state (
    key   TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
