-- 002: sessions, projected from session.started / session.ended in the same transaction as the
-- events, so "who holds the agent lease, since when, and how did its predecessor end" is one
-- index seek rather than a ledger scan. A session.ended whose session.started never arrived
-- still gets a row (its start columns empty), as spans do.
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,  -- the payload's session_id
    type        TEXT,              -- agent; voice / phone once Realtime sessions are recorded
    holder      TEXT,              -- the process instance that held it
    started_at  TEXT,
    started_seq INTEGER,           -- the session.started event
    ended_at    TEXT,
    end_reason  TEXT,              -- shutdown, superseded or lost; the first end recorded wins
    supersedes  TEXT               -- the predecessor this session closed when it started
);
-- The open session of a type, newest first.
CREATE INDEX sessions_open_by_type ON sessions (type, started_seq) WHERE ended_at IS NULL;
