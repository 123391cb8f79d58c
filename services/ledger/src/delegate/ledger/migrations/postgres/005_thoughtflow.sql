-- 005: the run pictures (thoughtflow), one row per run (see the SQLite migration of the same number).
CREATE TABLE thoughtflow_artifacts (
    run_id      TEXT COLLATE "C" PRIMARY KEY,
    run_type    TEXT NOT NULL,
    span_id     TEXT COLLATE "C",
    d2_path     TEXT NOT NULL,
    svg_path    TEXT,
    bytes       BIGINT NOT NULL,
    through_seq BIGINT NOT NULL,
    error       TEXT,
    created_at  TIMESTAMPTZ NOT NULL,
    event_id    TEXT COLLATE "C" NOT NULL,
    seq         BIGINT NOT NULL
);
