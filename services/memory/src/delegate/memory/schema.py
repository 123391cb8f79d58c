"""The index's tables. A projection of ledger events: nothing here is the truth, so a change of
layout bumps ``VERSION`` and the index is rebuilt by replaying the ledger, never migrated."""

VERSION = 5  # 3: people and commitments (issue #30); 4: contacts imported from CardDAV; 5: cards gone, dates offered

# porter over unicode61: "moved" finds "moving", and accents and case do not matter.
TOKENIZE = "porter unicode61 remove_diacritics 2"

DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);

CREATE TABLE IF NOT EXISTS messages (
    rowid INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    channel TEXT NOT NULL,
    role TEXT NOT NULL,
    conversation_id TEXT,
    span_id TEXT,
    speaker TEXT,
    import_id TEXT,
    ref TEXT,
    text TEXT NOT NULL,
    suppressed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS messages_ts ON messages (ts);
CREATE INDEX IF NOT EXISTS messages_conversation ON messages (conversation_id, seq);
CREATE INDEX IF NOT EXISTS messages_import ON messages (import_id);
-- context: the previous message of the same conversation, so a question finds its answer turn
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5 (text, speaker, context, tokenize='{TOKENIZE}');
-- how many messages hold each (stemmed) term: search leaves terms that are everywhere out of
-- the candidate query, which keeps its cost bounded however large the index grows
CREATE VIRTUAL TABLE IF NOT EXISTS messages_vocab USING fts5vocab (messages_fts, 'row');

CREATE TABLE IF NOT EXISTS facts (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    type TEXT NOT NULL,
    text TEXT NOT NULL,
    subject TEXT,
    status TEXT NOT NULL,
    valid_at REAL NOT NULL,
    invalid_at REAL,
    superseded_by TEXT,
    supersedes TEXT NOT NULL DEFAULT '[]',
    event_ids TEXT NOT NULL DEFAULT '[]',
    refs TEXT NOT NULL DEFAULT '[]',
    origin TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS facts_status ON facts (status, type);
CREATE INDEX IF NOT EXISTS facts_updated ON facts (updated_at);
-- active facts only: a retired or forgotten fact can never be a search result
CREATE VIRTUAL TABLE IF NOT EXISTS facts_fts USING fts5 (text, subject, tokenize='{TOKENIZE}');

CREATE TABLE IF NOT EXISTS fact_history (
    fact_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    kind TEXT NOT NULL,
    event_id TEXT NOT NULL,
    ts REAL NOT NULL,
    text TEXT,
    by TEXT,
    PRIMARY KEY (fact_id, event_id, kind)
);
CREATE INDEX IF NOT EXISTS fact_history_event ON fact_history (event_id);

CREATE TABLE IF NOT EXISTS episodes (
    rowid INTEGER PRIMARY KEY,
    event_id TEXT NOT NULL UNIQUE,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    conversation_id TEXT,
    span_id TEXT,
    checkpoint_id TEXT,
    text TEXT NOT NULL,
    after_seq INTEGER,
    through_seq INTEGER,
    turn_ids TEXT NOT NULL DEFAULT '[]'
);
CREATE INDEX IF NOT EXISTS episodes_ts ON episodes (ts);
CREATE VIRTUAL TABLE IF NOT EXISTS episodes_fts USING fts5 (text, tokenize='{TOKENIZE}');

CREATE TABLE IF NOT EXISTS pending_turns (
    turn_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    ts REAL NOT NULL,
    conversation_id TEXT,
    span_id TEXT,
    channel TEXT NOT NULL,
    text TEXT NOT NULL,
    answer_text TEXT
);
CREATE INDEX IF NOT EXISTS pending_turns_seq ON pending_turns (seq);
-- memory.extracted events with items, until the extractor has reconciled them into fact changes:
-- what a restart (or extraction switched on again) still has to do after the follower moved past.
CREATE TABLE IF NOT EXISTS reconcile_pending (
    event_id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL,
    event TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS imports (
    import_id TEXT PRIMARY KEY,
    status TEXT NOT NULL DEFAULT 'running',
    total INTEGER NOT NULL DEFAULT 0,
    events INTEGER NOT NULL DEFAULT 0,
    indexed INTEGER NOT NULL DEFAULT 0,
    conversations INTEGER NOT NULL DEFAULT 0,
    errors TEXT NOT NULL DEFAULT '[]'
);

CREATE TABLE IF NOT EXISTS speakers (name TEXT PRIMARY KEY, messages INTEGER NOT NULL DEFAULT 0);

-- people (person.* events): names and contact points as JSON lists; a forgotten person keeps its
-- row (status 'forgotten') so the names never make a person again, and loses its links
CREATE TABLE IF NOT EXISTS people (
    rowid INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    aliases TEXT NOT NULL DEFAULT '[]',
    relation TEXT,
    phones TEXT NOT NULL DEFAULT '[]',
    emails TEXT NOT NULL DEFAULT '[]',
    dates TEXT NOT NULL DEFAULT '[]',
    status TEXT NOT NULL DEFAULT 'active',
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    seq INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS person_facts (
    person_id TEXT NOT NULL,
    fact_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    PRIMARY KEY (person_id, fact_id)
);
CREATE INDEX IF NOT EXISTS person_facts_fact ON person_facts (fact_id);
CREATE TABLE IF NOT EXISTS person_mentions (
    person_id TEXT NOT NULL,
    event_id TEXT NOT NULL,
    ts REAL NOT NULL,
    PRIMARY KEY (person_id, event_id)
);
CREATE TABLE IF NOT EXISTS commitments (
    id TEXT PRIMARY KEY,
    by TEXT NOT NULL,
    what TEXT NOT NULL,
    to_name TEXT,
    person_id TEXT,
    due REAL,
    due_text TEXT,
    state TEXT NOT NULL DEFAULT 'open',
    event_ids TEXT NOT NULL DEFAULT '[]',
    made_at REAL NOT NULL,
    closed_at REAL,
    reason TEXT,
    due_fired INTEGER NOT NULL DEFAULT 0,
    seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS commitments_state ON commitments (state, due);
-- contacts (person.imported): which person an address book's card became, and what its last
-- import said (JSON), so the next import replaces that and keeps what turns and edits added
CREATE TABLE IF NOT EXISTS person_sources (
    source TEXT NOT NULL,
    contact_uid TEXT NOT NULL,
    person_id TEXT NOT NULL,
    imported TEXT NOT NULL,
    listed INTEGER NOT NULL DEFAULT 1,  -- 0: the card was deleted from the address book
    PRIMARY KEY (source, contact_uid)
);
CREATE INDEX IF NOT EXISTS person_sources_person ON person_sources (person_id);
-- key dates the owner was offered a yearly reminder for (a person.date or person.dates signal),
-- or will be (learned in a turn: the inner plane offers each), so none is offered twice
CREATE TABLE IF NOT EXISTS dates_offered (
    person_id TEXT NOT NULL,
    label TEXT NOT NULL,
    date TEXT NOT NULL,
    PRIMARY KEY (person_id, label, date)
);
-- dates imported from cards since the last contacts.synced, not offered yet
CREATE TABLE IF NOT EXISTS dates_pending (
    person_id TEXT NOT NULL,
    label TEXT NOT NULL,
    date TEXT NOT NULL,
    PRIMARY KEY (person_id, label, date)
);
-- one offer per import that brought dates (date_offers.py raises it), until its signal is committed
CREATE TABLE IF NOT EXISTS date_batches (signal_id TEXT PRIMARY KEY, seq INTEGER NOT NULL, signal TEXT NOT NULL);
-- every person.* and commitment.* event applied (read-your-writes for the extractor and commands)
CREATE TABLE IF NOT EXISTS people_log (event_id TEXT PRIMARY KEY, seq INTEGER NOT NULL);

-- MEMORY_EMBEDDINGS (delegate.memory.vectors): a unit float32 vector per text row, derived from
-- the rows above in the background. Not a change of layout: an index without it gets it empty,
-- and whatever it lacks is embedded again, so VERSION stays and nothing is replayed for it.
CREATE TABLE IF NOT EXISTS vectors (
    kind TEXT NOT NULL,  -- fact, episode, message
    row INTEGER NOT NULL,  -- that table's rowid
    vec BLOB NOT NULL,
    PRIMARY KEY (kind, row)
) WITHOUT ROWID;
"""

# Per read connection: the index's own tokenizer run over a query's words gives the exact
# terms the index holds (porter's stems), to look their document counts up in messages_vocab.
READER_DDL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words USING fts5 (word, tokenize='{TOKENIZE}');
CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_terms USING fts5vocab (temp, query_words, 'instance');
"""
