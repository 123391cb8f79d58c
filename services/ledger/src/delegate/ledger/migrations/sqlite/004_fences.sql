-- 004: the highest fencing token seen per singleton (agent, voice), raised in the transaction
-- that stores the events carrying it, and read in every transaction that stores fenced ones:
-- an event with an older token comes from a deposed leader and is refused, after a restart too.
CREATE TABLE fences (
    singleton TEXT PRIMARY KEY,
    token     INTEGER NOT NULL  -- the lease's KV revision at its holder's acquisition
);
