-- 001: the event ledger, its conversation and span summaries, and the writer's own state.
-- Identifiers use the C collation so that (ts, id) sorts exactly as it does in SQLite and Python.

CREATE TABLE conversation_events (
    seq             BIGSERIAL PRIMARY KEY,  -- commit order (writers are serialized by an advisory lock)
    id              TEXT COLLATE "C" NOT NULL,
    ts              TIMESTAMPTZ NOT NULL,
    conversation_id TEXT COLLATE "C",
    span_id         TEXT COLLATE "C",
    kind            TEXT NOT NULL,
    channel         TEXT NOT NULL,
    role            TEXT,
    parent_id       TEXT,
    client_msg_id   TEXT,
    payload         JSON NOT NULL  -- json, not jsonb: kept byte-exact, and jsonb refuses \u0000 in text
);
CREATE UNIQUE INDEX conversation_events_by_id ON conversation_events (id);
CREATE INDEX conversation_events_by_timeline ON conversation_events (ts, id) INCLUDE (seq, span_id);
CREATE INDEX conversation_events_by_span ON conversation_events (span_id, ts, id) WHERE span_id IS NOT NULL;
CREATE INDEX conversation_events_by_conversation_kind
    ON conversation_events (conversation_id, kind, seq) WHERE conversation_id IS NOT NULL;
CREATE INDEX conversation_events_by_client_msg_id
    ON conversation_events (client_msg_id) WHERE client_msg_id IS NOT NULL;

CREATE TABLE conversations (
    id            TEXT COLLATE "C" PRIMARY KEY,
    opened_at     TIMESTAMPTZ,
    ended_at      TIMESTAMPTZ,
    last_event_at TIMESTAMPTZ NOT NULL,
    last_seq      BIGINT NOT NULL
);
CREATE INDEX conversations_open_by_activity ON conversations (last_seq) WHERE ended_at IS NULL;

CREATE TABLE spans (
    id              TEXT COLLATE "C" PRIMARY KEY,
    conversation_id TEXT COLLATE "C",
    type            TEXT,
    opened_at       TIMESTAMPTZ,
    opened_seq      BIGINT,
    closed_at       TIMESTAMPTZ
);
CREATE INDEX spans_by_conversation ON spans (conversation_id, opened_seq);

CREATE TABLE ledger_state (
    key   TEXT PRIMARY KEY,
    value BIGINT NOT NULL
);
