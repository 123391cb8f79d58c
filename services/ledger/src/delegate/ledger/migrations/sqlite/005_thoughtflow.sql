-- 005: the run pictures (thoughtflow), projected from thoughtflow.artifact events in the same
-- transaction as the events: one row per run, its newest picture, so GET /api/runs/{id}/diagram
-- is one primary-key seek. "Newest" is the picture covering the most of the run (through_seq),
-- the later commit on a tie: an older drawing committed late never replaces a newer one.
CREATE TABLE thoughtflow_artifacts (
    run_id      TEXT PRIMARY KEY,
    run_type    TEXT NOT NULL,     -- task or activation
    span_id     TEXT,              -- the run's span
    d2_path     TEXT NOT NULL,     -- relative to RUNTIME_DATA_DIR
    svg_path    TEXT,              -- NULL: rendering failed (error says why)
    bytes       INTEGER NOT NULL,  -- the SVG's size
    through_seq INTEGER NOT NULL,  -- the newest ledger seq the picture covers
    error       TEXT,
    created_at  TEXT NOT NULL,     -- the event's ts
    event_id    TEXT NOT NULL,     -- the thoughtflow.artifact event: its payload is the whole record
    seq         INTEGER NOT NULL   -- that event's seq
);
