"""The memory index: one SQLite file (WAL, FTS5), a projection of the ledger's events.

One writer connection (the follower's), guarded by a lock; every other thread reads through a
connection of its own (WAL: readers never wait for the writer, and see only committed
batches). ``last_seq`` is stored in the same transaction as the rows an event produced, so
after any crash the file is exactly the projection of the events up to ``last_seq``.

If the file is missing, or was built by another ``schema.VERSION``, it starts empty and the
follower replays the ledger from seq 0.
"""

import json
import logging
import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from delegate.contracts.events import Event, Message
from delegate.contracts.memory import FactChange, ImportStatus, MemoryFact
from delegate.contracts.people import Commitment

from . import people_index, projection, schema
from .people import Known
from .people_index import people_applied
from .query import fts_query
from .reads import snapshot
from .records import FactRow, PendingTurn, from_epoch

log = logging.getLogger(__name__)


class ApplyFailed(Exception):
    """An event of a batch could not be projected; the events before it are committed."""

    def __init__(self, event: Event, cause: Exception) -> None:
        super().__init__(f"event {event.id} ({event.kind}, seq {event.seq}): {cause!r}")
        self.event = event
        self.cause = cause


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=WAL")
    # NORMAL in WAL mode: a power cut may lose the newest commits, never consistency; those
    # events are simply replayed from the ledger (last_seq is rolled back with them).
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("PRAGMA temp_store=MEMORY")
    db.execute("PRAGMA cache_size=-32000")
    return db


def remove_files(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


class MemoryIndex:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._write_lock = threading.Lock()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._db = self._open()
        self.last_seq = int(self._meta("last_seq") or 0)
        self._speakers: dict[str, list[str]] | None = None  # lower-case name token -> speakers

    # ---- opening ---------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        db = _connect(self.path)
        if not fresh:
            row = self._version(db)
            if row != str(schema.VERSION):
                log.warning("index %s has schema %s, not %s: rebuilding it", self.path, row, schema.VERSION)
                db.close()
                remove_files(self.path)
                db = _connect(self.path)
                fresh = True
        if fresh:
            log.info("new index at %s: the ledger is replayed from seq 0", self.path)
        db.executescript(schema.DDL)
        db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)", (str(schema.VERSION),))
        db.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('last_seq', '0')")
        return db

    @staticmethod
    def _version(db: sqlite3.Connection) -> str | None:
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        except sqlite3.DatabaseError:
            return None  # not an index of ours (or no meta table yet)
        return row[0] if row else None

    def _meta(self, key: str) -> str | None:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return row[0] if row else None

    def reader(self) -> sqlite3.Connection:
        """This thread's read connection."""
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = _connect(self.path)
            db.executescript(schema.READER_DDL)
            self._local.db = db
            with self._readers_lock:
                self._readers.append(db)
        return db

    def close(self) -> None:
        with self._readers_lock:
            for db in self._readers:
                db.close()
            self._readers.clear()
        with self._write_lock:
            self._db.close()

    # ---- writing (the follower) ------------------------------------------------------------

    def apply_batch(self, events: Sequence[Event]) -> int:
        """Project events (in seq order, after ``last_seq``) in one transaction with the new
        ``last_seq``; returns how many were applied. Raises ``ApplyFailed`` for the first one
        that raised, after committing those before it. Safe to call from a worker thread:
        ``last_seq`` only moves once its transaction is committed, so nobody reads ahead."""
        applied = 0
        speakers_changed = False
        failed: ApplyFailed | None = None
        with self._write_lock:
            db = self._db
            through = self.last_seq
            db.execute("BEGIN IMMEDIATE")
            try:
                for event in events:
                    assert event.seq is not None
                    if event.seq <= through:
                        continue
                    db.execute("SAVEPOINT event")
                    try:
                        projection.apply(db, event)
                    except Exception as exc:
                        db.execute("ROLLBACK TO event")
                        db.execute("RELEASE event")
                        failed = ApplyFailed(event, exc)
                        break
                    db.execute("RELEASE event")
                    through = event.seq
                    applied += 1
                    # The key, not a model of the payload: the replay sees every message ever written.
                    speakers_changed = speakers_changed or (event.is_kind(Message) and "imported" in event.payload)
                self._commit(db, through)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            self.last_seq = through
        if speakers_changed:
            self._speakers = None
        if failed is not None:
            raise failed
        return applied

    def to_reconcile(self) -> list[Event]:
        """Extractions whose items are not reconciled yet, oldest first (survives restarts)."""
        rows = self.reader().execute("SELECT event FROM reconcile_pending ORDER BY seq").fetchall()
        return [Event.model_validate_json(r[0]) for r in rows]

    def reconciled(self, event_id: str) -> None:
        """The extraction's fact changes are all in the index: done with it. Bookkeeping of the
        extractor, not a projection: a rebuilt index lists every extraction again, and reconciling
        one twice writes nothing (its changes have derived ids)."""
        with self._write_lock:
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM reconcile_pending WHERE event_id = ?", (event_id,))
            self._db.execute("COMMIT")

    def skip(self, event: Event) -> None:
        """Move past an event that could not be projected (it has been dead-lettered)."""
        assert event.seq is not None
        with self._write_lock:
            if event.seq > self.last_seq:
                self._db.execute("BEGIN IMMEDIATE")
                self._commit(self._db, event.seq)
                self.last_seq = event.seq

    def put_vectors(self, kind: str, vectors: Sequence[tuple[int, bytes, str]]) -> None:
        """Store embedded rows' vectors (row, vector, the text embedded; delegate.memory.vectors)
        in a short write of its own."""
        with self._write_lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if kind == "fact":  # an edit committed since the text was read leaves it unembedded
                    self._db.executemany(
                        "INSERT OR REPLACE INTO vectors (kind, row, vec) SELECT 'fact', ?, ?"
                        " WHERE (SELECT text FROM facts WHERE rowid = ?) = ?",
                        [(row, vec, row, text) for row, vec, text in vectors],
                    )
                else:
                    self._db.executemany(
                        "INSERT OR REPLACE INTO vectors (kind, row, vec) VALUES (?, ?, ?)",
                        [(kind, row, vec) for row, vec, _ in vectors],
                    )
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def reset_vectors(self, model: str) -> None:
        """Empty the stored vectors when they were made by another model than ``model``."""
        with self._write_lock:
            if self._meta("vectors_model") == model:
                return
            self._db.execute("BEGIN IMMEDIATE")
            self._db.execute("DELETE FROM vectors")
            self._db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES ('vectors_model', ?)", (model,))
            self._db.execute("COMMIT")

    def _commit(self, db: sqlite3.Connection, through: int) -> None:
        db.execute("UPDATE meta SET value = ? WHERE key = 'last_seq'", (str(through),))
        db.execute("COMMIT")

    # ---- reading ---------------------------------------------------------------------------

    def speakers(self) -> dict[str, list[str]]:
        """Lower-case name tokens (first names too) of everyone who speaks in imported messages."""
        if self._speakers is None:
            table: dict[str, list[str]] = {}
            for (name,) in self.reader().execute("SELECT name FROM speakers"):
                for token in {name.lower(), *name.lower().split()}:
                    table.setdefault(token, []).append(name)
            self._speakers = table
        return self._speakers

    def has_change(self, event_id: str) -> bool:
        """Whether a fact change with this event id is in the index (read-your-writes)."""
        db = self.reader()
        row = db.execute("SELECT 1 FROM fact_history WHERE event_id = ? LIMIT 1", (event_id,)).fetchone()
        return row is not None or people_applied(db, event_id)

    def fact_of_change(self, event_id: str) -> str | None:
        """The fact a fact change (``memory.fact.added``/``cited``) event was about."""
        row = self.reader().execute(
            "SELECT fact_id FROM fact_history WHERE event_id = ?"
            " AND kind IN ('memory.fact.added', 'memory.fact.cited')",
            (event_id,),
        ).fetchone()
        return str(row[0]) if row else None

    def known_people(self) -> list[Known]:
        return people_index.known_people(self.reader())

    def commitments(self, *, state: str, limit: int) -> list[Commitment]:
        return people_index.list_commitments(self.reader(), state=state, limit=limit)

    def fact(self, fact_id: str) -> FactRow | None:
        row = self.reader().execute("SELECT * FROM facts WHERE id = ?", (fact_id,)).fetchone()
        return _fact_row(row) if row else None

    def active_facts(self, limit: int = 200) -> list[FactRow]:
        rows = self.reader().execute(
            "SELECT * FROM facts WHERE status = 'active' ORDER BY updated_at DESC LIMIT ?", (limit,)
        )
        return [_fact_row(r) for r in rows]

    def similar_facts(self, text: str, limit: int = 10) -> list[FactRow]:
        """Active facts sharing words with ``text``, best BM25 match first (dedup candidates)."""
        match = fts_query(text)
        if match is None:
            return []
        rows = self.reader().execute(
            "SELECT f.* FROM facts_fts JOIN facts f ON f.rowid = facts_fts.rowid"
            " WHERE facts_fts MATCH ? AND f.status = 'active' ORDER BY bm25(facts_fts) LIMIT ?",
            (match, limit),
        )
        return [_fact_row(r) for r in rows]

    def pending_turns(self, limit: int = 100) -> list[PendingTurn]:
        """User turns no per-turn extraction has read yet, oldest first."""
        rows = self.reader().execute("SELECT * FROM pending_turns ORDER BY seq LIMIT ?", (limit,))
        return [
            PendingTurn(
                turn_id=r["turn_id"], seq=r["seq"], ts=from_epoch(r["ts"]), conversation_id=r["conversation_id"],
                span_id=r["span_id"], channel=r["channel"], text=r["text"], answer_text=r["answer_text"],
            )
            for r in rows
        ]

    def memory_fact(self, fact_id: str) -> MemoryFact | None:
        with snapshot(self.reader()) as db:
            row = db.execute("SELECT * FROM facts WHERE id = ?", (fact_id,)).fetchone()
            return _memory_fact(row, self._history(db, [fact_id]).get(fact_id, [])) if row else None

    def list_facts(self, *, include_retired: bool, limit: int) -> list[MemoryFact]:
        """Facts with their history, the most recently changed first."""
        where = "" if include_retired else "WHERE status = 'active'"
        order = "ORDER BY updated_at DESC, seq DESC"
        with snapshot(self.reader()) as db:
            rows = db.execute(f"SELECT * FROM facts {where} {order} LIMIT ?", (limit,)).fetchall()
            history = self._history(db, [r["id"] for r in rows])
        return [_memory_fact(r, history.get(r["id"], [])) for r in rows]

    @staticmethod
    def _history(db: sqlite3.Connection, fact_ids: list[str]) -> dict[str, list[FactChange]]:
        out: dict[str, list[FactChange]] = {}
        for start in range(0, len(fact_ids), 500):
            chunk = fact_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = db.execute(
                f"SELECT * FROM fact_history WHERE fact_id IN ({marks}) ORDER BY seq DESC, kind", chunk
            )
            for r in rows:
                change = FactChange(
                    kind=r["kind"], event_id=r["event_id"], ts=from_epoch(r["ts"]), text=r["text"], by=r["by"]
                )
                out.setdefault(r["fact_id"], []).append(change)
        return out

    def import_status(self, import_id: str) -> ImportStatus | None:
        row = self.reader().execute("SELECT * FROM imports WHERE import_id = ?", (import_id,)).fetchone()
        if row is None:
            return None
        return ImportStatus(
            import_id=import_id, status=row["status"], events=row["events"], total=row["total"],
            indexed=row["indexed"], conversations=row["conversations"], errors=json.loads(row["errors"]),
        )

    def counts(self) -> dict[str, int]:
        db = self.reader()
        return {
            table: int(db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
            for table in ("messages", "facts", "episodes", "pending_turns")
        }


def _fact_row(r: sqlite3.Row) -> FactRow:
    return FactRow(
        id=r["id"], type=r["type"], text=r["text"], status=r["status"], valid_at=from_epoch(r["valid_at"]),
        invalid_at=from_epoch(r["invalid_at"]) if r["invalid_at"] is not None else None,
        event_ids=tuple(json.loads(r["event_ids"])), subject=r["subject"],
    )


def _memory_fact(r: sqlite3.Row, history: list[FactChange]) -> MemoryFact:
    fields: dict[str, Any] = {
        "id": r["id"], "type": r["type"], "text": r["text"], "status": r["status"],
        "valid_at": from_epoch(r["valid_at"]),
        "invalid_at": from_epoch(r["invalid_at"]) if r["invalid_at"] is not None else None,
        "superseded_by": r["superseded_by"], "supersedes": json.loads(r["supersedes"]),
        "event_ids": json.loads(r["event_ids"]), "refs": json.loads(r["refs"]), "origin": r["origin"],
        "created_at": from_epoch(r["created_at"]), "updated_at": from_epoch(r["updated_at"]), "history": history,
    }
    return MemoryFact(**fields)
