-- 002: sessions, projected from session.started / session.ended in the same transaction as the
-- events (see the SQLite migration of the same number).

CREATE TABLE sessions (
    id          TEXT COLLATE "C" PRIMARY KEY,
    type        TEXT,
    holder      TEXT,
    started_at  TIMESTAMPTZ,
    started_seq BIGINT,
    ended_at    TIMESTAMPTZ,
    end_reason  TEXT,
    supersedes  TEXT COLLATE "C"
);
CREATE INDEX sessions_open_by_type ON sessions (type, started_seq) WHERE ended_at IS NULL;
