-- 007: the usage projection (issue #29); see the SQLite migration of the same number. Hours are
-- the same UTC text keys (YYYY-MM-DDTHH) and span times the ledger's wire timestamps, so both
-- backends answer alike.
CREATE TABLE usage_hours (
    hour                TEXT COLLATE "C" NOT NULL,
    purpose             TEXT COLLATE "C" NOT NULL,
    channel             TEXT COLLATE "C" NOT NULL,
    model               TEXT COLLATE "C" NOT NULL,
    calls               BIGINT NOT NULL,
    input_tokens        BIGINT NOT NULL,
    cached_tokens       BIGINT NOT NULL,
    output_tokens       BIGINT NOT NULL,
    audio_input_tokens  BIGINT NOT NULL,
    audio_output_tokens BIGINT NOT NULL,
    web_search_calls    BIGINT NOT NULL,
    cost_usd            DOUBLE PRECISION NOT NULL,
    unpriced_calls      BIGINT NOT NULL,
    PRIMARY KEY (hour, purpose, channel, model)
);

CREATE TABLE usage_spans (
    span_id         TEXT COLLATE "C" PRIMARY KEY,
    purpose         TEXT NOT NULL,
    conversation_id TEXT COLLATE "C",
    first_ts        TEXT COLLATE "C" NOT NULL,
    last_ts         TEXT COLLATE "C" NOT NULL,
    calls           BIGINT NOT NULL,
    input_tokens    BIGINT NOT NULL,
    output_tokens   BIGINT NOT NULL,
    cost_usd        DOUBLE PRECISION NOT NULL,
    unpriced_calls  BIGINT NOT NULL
);
CREATE INDEX usage_spans_by_last ON usage_spans (last_ts);

INSERT INTO usage_hours
SELECT to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24'), payload->>'purpose', channel, payload->>'model',
       COUNT(*), SUM((payload->>'input_tokens')::bigint), SUM((payload->>'cached_tokens')::bigint),
       SUM((payload->>'output_tokens')::bigint), SUM((payload->>'audio_input_tokens')::bigint),
       SUM((payload->>'audio_output_tokens')::bigint), SUM((payload->>'web_search_calls')::bigint),
       COALESCE(SUM((payload->>'cost_usd')::double precision), 0),
       COUNT(*) FILTER (WHERE payload->>'cost_usd' IS NULL)
FROM conversation_events WHERE kind = 'model.usage'
GROUP BY 1, 2, 3, 4;

INSERT INTO usage_spans
SELECT span_id, MIN(payload->>'purpose'), MIN(conversation_id),
       to_char(MIN(ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'),
       to_char(MAX(ts) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'), COUNT(*),
       SUM((payload->>'input_tokens')::bigint), SUM((payload->>'output_tokens')::bigint),
       COALESCE(SUM((payload->>'cost_usd')::double precision), 0),
       COUNT(*) FILTER (WHERE payload->>'cost_usd' IS NULL)
FROM conversation_events WHERE kind = 'model.usage' AND span_id IS NOT NULL
GROUP BY span_id;
