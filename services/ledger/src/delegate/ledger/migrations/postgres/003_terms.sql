-- 003: sessions become terms (see the SQLite migration of the same number). payload is json,
-- kept byte-exact: the first-key rename is done on its text; other spellings go through jsonb.
ALTER TABLE sessions RENAME TO terms;
ALTER INDEX sessions_open_by_type RENAME TO terms_open_by_type;
UPDATE conversation_events
SET kind = 'term.' || substr(kind, 9),
    payload = CASE
        WHEN left(payload::text, 14) = '{"session_id":' THEN ('{"term_id":' || substr(payload::text, 15))::json
        ELSE ((payload::jsonb - 'session_id') || jsonb_build_object('term_id', payload::jsonb -> 'session_id'))::json
    END
WHERE kind IN ('session.started', 'session.ended');
