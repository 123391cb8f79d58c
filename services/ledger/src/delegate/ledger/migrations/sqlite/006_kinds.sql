-- 006: events by kind, in commit order. Services that rebuild their state from the ledger ask for
-- a few kinds from the first seq on (the tasks service's journal and its run pictures at every
-- start, the agent's newest capsule, the pollers' newest mail.progress); without this index each
-- such query read every event (seq > N, filtered by kind): 0.15-0.25 s at 1,000,000 events and
-- more as the history grows, all the while holding the ledger's one reader thread.
CREATE INDEX conversation_events_by_kind ON conversation_events (kind, seq);
