-- 004: the highest fencing token seen per singleton (see the SQLite migration of the same number).
CREATE TABLE fences (
    singleton TEXT COLLATE "C" PRIMARY KEY,
    token     BIGINT NOT NULL
);
