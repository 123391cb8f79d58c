-- 006: events by kind, in commit order (see the SQLite migration of the same number). Without it
-- a query for a kind no event has yet (task.*, thoughtflow.artifact at the tasks service's start)
-- walked the primary key through every row: 0.4-1 s at 1,000,000 events, the ledger's paged
-- scans being cursors, which PostgreSQL plans for their first rows.
CREATE INDEX conversation_events_by_kind ON conversation_events (kind, seq);
