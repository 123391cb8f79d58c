-- 007: the usage projection (issue #29), kept in the same transaction as the events: model.usage
-- totals per UTC hour (YYYY-MM-DDTHH), purpose, channel and model, and per span. GET /api/usage
-- for 30 days reads at most 720 hours of rows, not every call. cost_usd sums the priced calls;
-- unpriced_calls counts the others (their cost is unknown, never 0).
CREATE TABLE usage_hours (
    hour                TEXT NOT NULL,
    purpose             TEXT NOT NULL,
    channel             TEXT NOT NULL,
    model               TEXT NOT NULL,
    calls               INTEGER NOT NULL,
    input_tokens        INTEGER NOT NULL,
    cached_tokens       INTEGER NOT NULL,
    output_tokens       INTEGER NOT NULL,
    audio_input_tokens  INTEGER NOT NULL,
    audio_output_tokens INTEGER NOT NULL,
    web_search_calls    INTEGER NOT NULL,
    cost_usd            REAL NOT NULL,
    unpriced_calls      INTEGER NOT NULL,
    PRIMARY KEY (hour, purpose, channel, model)
) WITHOUT ROWID;

CREATE TABLE usage_spans (
    span_id         TEXT PRIMARY KEY,
    purpose         TEXT NOT NULL,  -- of the span's first call: activation, task_step, owner_turn, ...
    conversation_id TEXT,
    first_ts        TEXT NOT NULL,
    last_ts         TEXT NOT NULL,
    calls           INTEGER NOT NULL,
    input_tokens    INTEGER NOT NULL,
    output_tokens   INTEGER NOT NULL,
    cost_usd        REAL NOT NULL,
    unpriced_calls  INTEGER NOT NULL
);
CREATE INDEX usage_spans_by_last ON usage_spans (last_ts);

-- The events stored before this migration, folded in once.
INSERT INTO usage_hours
SELECT substr(ts, 1, 13), json_extract(payload, '$.purpose'), channel, json_extract(payload, '$.model'),
       COUNT(*), SUM(json_extract(payload, '$.input_tokens')), SUM(json_extract(payload, '$.cached_tokens')),
       SUM(json_extract(payload, '$.output_tokens')), SUM(json_extract(payload, '$.audio_input_tokens')),
       SUM(json_extract(payload, '$.audio_output_tokens')), SUM(json_extract(payload, '$.web_search_calls')),
       COALESCE(SUM(json_extract(payload, '$.cost_usd')), 0),
       SUM(json_extract(payload, '$.cost_usd') IS NULL)
FROM conversation_events WHERE kind = 'model.usage'
GROUP BY 1, 2, 3, 4;

INSERT INTO usage_spans
SELECT span_id, MIN(json_extract(payload, '$.purpose')), MIN(conversation_id), MIN(ts), MAX(ts), COUNT(*),
       SUM(json_extract(payload, '$.input_tokens')), SUM(json_extract(payload, '$.output_tokens')),
       COALESCE(SUM(json_extract(payload, '$.cost_usd')), 0), SUM(json_extract(payload, '$.cost_usd') IS NULL)
FROM conversation_events WHERE kind = 'model.usage' AND span_id IS NOT NULL
GROUP BY span_id;
