-- 003: "session" named three things; a singleton's leadership is a TERM now (term.started /
-- term.ended, payload term_id). The table, its index and the stored events are renamed, so
-- the history reads as what the code now writes. Payloads were stored as pydantic wrote them,
-- field order kept, so session_id is their first key and is renamed in place; any other
-- spelling goes through the JSON functions (term_id then moves to the end: same document).
ALTER TABLE sessions RENAME TO terms;
DROP INDEX sessions_open_by_type;
CREATE INDEX terms_open_by_type ON terms (type, started_seq) WHERE ended_at IS NULL;
UPDATE conversation_events
SET kind = 'term.' || substr(kind, 9),
    payload = CASE
        WHEN substr(payload, 1, 14) = '{"session_id":' THEN '{"term_id":' || substr(payload, 15)
        ELSE json_remove(json_set(payload, '$.term_id', json_extract(payload, '$.session_id')), '$.session_id')
    END
WHERE kind IN ('session.started', 'session.ended');
