"""How each committed event changes the index: one function per kind, run inside the
follower's transaction (which also records the event's seq), so the index is always exactly
the projection of the ledger up to ``last_seq``. Every write is keyed by event id, so
applying an event twice changes nothing."""

import json
import sqlite3
from collections.abc import Callable
from datetime import datetime
from typing import Any

from delegate.contracts.events import (
    Event,
    ImportFinished,
    ImportStarted,
    MemoryExtracted,
    MemoryFactAdded,
    MemoryFactCited,
    MemoryFactEdited,
    MemoryFactForgotten,
    Message,
)

from . import projection_contacts, projection_dates, projection_people


def epoch(ts: datetime) -> float:
    return ts.timestamp()


def _merged(old: list[str], new: list[str]) -> list[str]:
    return list(dict.fromkeys([*old, *new]))


def _history(
    db: sqlite3.Connection, fact_id: str, event: Event, kind: str, text: str | None, by: str | None = None
) -> None:
    assert event.seq is not None
    db.execute(
        "INSERT OR IGNORE INTO fact_history (fact_id, seq, kind, event_id, ts, text, by) VALUES (?,?,?,?,?,?,?)",
        (fact_id, event.seq, kind, event.id, epoch(event.ts), text, by),
    )


def _refs_of(db: sqlite3.Connection, event_ids: list[str]) -> list[str]:
    """The ``ref``s of the imported messages among ``event_ids`` (what search returns as refs)."""
    if not event_ids:
        return []
    marks = ",".join("?" * len(event_ids))
    rows = db.execute(f"SELECT event_id, ref FROM messages WHERE event_id IN ({marks}) AND ref IS NOT NULL", event_ids)
    by_id = dict(rows.fetchall())
    return [by_id[e] for e in event_ids if e in by_id]


def _count_import_event(db: sqlite3.Connection, import_id: str, *, indexed: bool) -> None:
    db.execute("INSERT OR IGNORE INTO imports (import_id) VALUES (?)", (import_id,))
    db.execute(
        "UPDATE imports SET events = events + 1, indexed = indexed + ? WHERE import_id = ?",
        (1 if indexed else 0, import_id),
    )


def _message(db: sqlite3.Connection, event: Event) -> None:
    assert event.seq is not None and event.role is not None
    payload = event.typed(Message)
    imported = payload.imported
    speaker = imported.speaker if imported else None
    cur = db.execute(
        "INSERT OR IGNORE INTO messages (event_id, seq, ts, channel, role, conversation_id, span_id, speaker,"
        " import_id, ref, text) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
        (
            event.id, event.seq, epoch(event.ts), event.channel, event.role, event.conversation_id,
            event.span_id, speaker, imported.import_id if imported else None,
            imported.ref if imported else None, payload.text,
        ),
    )
    if cur.rowcount == 0:
        return  # applied before
    rowid = cur.lastrowid
    context = ""
    if event.conversation_id is not None:
        prev = db.execute(
            "SELECT text FROM messages WHERE conversation_id = ? AND seq < ? ORDER BY seq DESC LIMIT 1",
            (event.conversation_id, event.seq),
        ).fetchone()
        context = prev[0] if prev else ""
    db.execute(
        "INSERT INTO messages_fts (rowid, text, speaker, context) VALUES (?,?,?,?)",
        (rowid, payload.text, speaker or "", context),
    )
    if rowid is not None:
        projection_people.suppress_if_forgotten(db, rowid)
    if speaker:
        db.execute(
            "INSERT INTO speakers (name, messages) VALUES (?, 1)"
            " ON CONFLICT (name) DO UPDATE SET messages = messages + 1",
            (speaker,),
        )
    if imported:
        _count_import_event(db, imported.import_id, indexed=True)
        return
    if event.role == "user" and event.channel != "inner":
        db.execute(
            "INSERT OR IGNORE INTO pending_turns (turn_id, seq, ts, conversation_id, span_id, channel, text)"
            " VALUES (?,?,?,?,?,?,?)",
            (event.id, event.seq, epoch(event.ts), event.conversation_id, event.span_id, event.channel, payload.text),
        )
    elif event.role == "assistant" and event.parent_id is not None:
        # A regenerated answer replaces the one before it: the turn is what was said last.
        db.execute("UPDATE pending_turns SET answer_text = ? WHERE turn_id = ?", (payload.text, event.parent_id))


def _extracted(db: sqlite3.Connection, event: Event) -> None:
    assert event.seq is not None
    payload = event.typed(MemoryExtracted)
    turn_ids = payload.turn_ids or []
    if payload.checkpoint_id is None and turn_ids:
        marks = ",".join("?" * len(turn_ids))
        db.execute(f"DELETE FROM pending_turns WHERE turn_id IN ({marks})", turn_ids)
    if payload.items or payload.people or payload.commitments:
        db.execute(
            "INSERT OR IGNORE INTO reconcile_pending (event_id, seq, event) VALUES (?,?,?)",
            (event.id, event.seq, event.model_dump_json()),
        )
    if not payload.summary:
        return
    parts = [payload.summary]
    if payload.decisions:
        parts.append("Decisions: " + "; ".join(payload.decisions))
    if payload.open_loops:
        parts.append("Open loops: " + "; ".join(payload.open_loops))
    text = "\n".join(parts)
    cur = db.execute(
        "INSERT OR IGNORE INTO episodes (event_id, seq, ts, conversation_id, span_id, checkpoint_id, text,"
        " after_seq, through_seq, turn_ids) VALUES (?,?,?,?,?,?,?,?,?,?)",
        (
            event.id, event.seq, epoch(event.ts), event.conversation_id, event.span_id, payload.checkpoint_id,
            text, payload.after_seq, payload.through_seq, json.dumps(turn_ids),
        ),
    )
    if cur.rowcount:
        db.execute("INSERT INTO episodes_fts (rowid, text) VALUES (?, ?)", (cur.lastrowid, text))


def _fact_row(db: sqlite3.Connection, fact_id: str) -> sqlite3.Row | None:
    row: sqlite3.Row | None = db.execute("SELECT * FROM facts WHERE id = ?", (fact_id,)).fetchone()
    return row


def _fact_added(db: sqlite3.Connection, event: Event) -> None:
    assert event.seq is not None
    p = event.typed(MemoryFactAdded)
    if _fact_row(db, p.fact_id) is not None:
        return  # applied before (or a second add of the same id: the first one stands)
    valid_at = epoch(p.valid_at)
    now = epoch(event.ts)
    cur = db.execute(
        "INSERT INTO facts (id, type, text, subject, status, valid_at, supersedes, event_ids, refs, origin,"
        " created_at, updated_at, seq) VALUES (?,?,?,?, 'active', ?,?,?,?,?,?,?,?)",
        (
            p.fact_id, p.type, p.text, p.subject, valid_at, json.dumps(p.supersedes), json.dumps(p.event_ids),
            json.dumps(_refs_of(db, p.event_ids)), p.origin, now, now, event.seq,
        ),
    )
    db.execute("INSERT INTO facts_fts (rowid, text, subject) VALUES (?,?,?)", (cur.lastrowid, p.text, p.subject or ""))
    _history(db, p.fact_id, event, "memory.fact.added", p.text)
    for old_id in p.supersedes:
        old = _fact_row(db, old_id)
        if old is None or old["status"] != "active" or old_id == p.fact_id:
            continue  # only a current fact can be retired; a forgotten one stays forgotten
        # Bi-temporal: the old fact was true until the new one became true.
        db.execute(
            "UPDATE facts SET status = 'superseded', invalid_at = ?, superseded_by = ?, updated_at = ? WHERE id = ?",
            (valid_at, p.fact_id, now, old_id),
        )
        db.execute("DELETE FROM facts_fts WHERE rowid = ?", (old["rowid"],))
        _history(db, old_id, event, "superseded", None, by=p.fact_id)


def _fact_cited(db: sqlite3.Connection, event: Event) -> None:
    p = event.typed(MemoryFactCited)
    row = _fact_row(db, p.fact_id)
    if row is None:
        return
    event_ids = _merged(json.loads(row["event_ids"]), p.event_ids)
    refs = _merged(json.loads(row["refs"]), _refs_of(db, p.event_ids))
    db.execute(
        "UPDATE facts SET event_ids = ?, refs = ?, updated_at = ? WHERE id = ?",
        (json.dumps(event_ids), json.dumps(refs), epoch(event.ts), p.fact_id),
    )
    if row["status"] == "forgotten":
        _suppress(db, p.event_ids)  # a forgotten fact's sources stay out of every model request
    _history(db, p.fact_id, event, "memory.fact.cited", p.text or None)


def _fact_edited(db: sqlite3.Connection, event: Event) -> None:
    p = event.typed(MemoryFactEdited)
    row = _fact_row(db, p.fact_id)
    if row is None:
        return
    db.execute(
        "UPDATE facts SET text = ?, type = ?, updated_at = ? WHERE id = ?",
        (p.text, p.type or row["type"], epoch(event.ts), p.fact_id),
    )
    if row["status"] == "active":
        db.execute("UPDATE facts_fts SET text = ? WHERE rowid = ?", (p.text, row["rowid"]))
    # the old wording's vector (if embeddings are on) goes; the new one is embedded in the background
    db.execute("DELETE FROM vectors WHERE kind = 'fact' AND row = ?", (row["rowid"],))
    # History keeps the text as it was before the edit (the row holds the current one).
    _history(db, p.fact_id, event, "memory.fact.edited", row["text"])


def _suppress(db: sqlite3.Connection, event_ids: list[str]) -> None:
    if event_ids:
        marks = ",".join("?" * len(event_ids))
        db.execute(f"UPDATE messages SET suppressed = 1 WHERE event_id IN ({marks})", event_ids)


def _fact_forgotten(db: sqlite3.Connection, event: Event) -> None:
    p = event.typed(MemoryFactForgotten)
    row = _fact_row(db, p.fact_id)
    if row is None:
        return
    db.execute("UPDATE facts SET status = 'forgotten', updated_at = ? WHERE id = ?", (epoch(event.ts), p.fact_id))
    db.execute("DELETE FROM facts_fts WHERE rowid = ?", (row["rowid"],))
    _suppress(db, json.loads(row["event_ids"]))
    _history(db, p.fact_id, event, "memory.fact.forgotten", p.reason or None)


def _import_started(db: sqlite3.Connection, event: Event) -> None:
    p = event.typed(ImportStarted)
    db.execute("INSERT OR IGNORE INTO imports (import_id) VALUES (?)", (p.import_id,))
    db.execute(
        "UPDATE imports SET total = ?, conversations = ? WHERE import_id = ?", (p.events, p.conversations, p.import_id)
    )


def _import_finished(db: sqlite3.Connection, event: Event) -> None:
    p = event.typed(ImportFinished)
    db.execute("INSERT OR IGNORE INTO imports (import_id) VALUES (?)", (p.import_id,))
    errors = json.dumps([e.model_dump() for e in p.errors])
    db.execute(
        "UPDATE imports SET status = ?, events = MAX(events, ?), conversations = ?, errors = ? WHERE import_id = ?",
        (p.status, p.events, p.conversations, errors, p.import_id),
    )


HANDLERS: dict[str, Callable[[sqlite3.Connection, Event], None]] = {
    "message": _message,
    "memory.extracted": _extracted,
    "memory.fact.added": _fact_added,
    "memory.fact.cited": _fact_cited,
    "memory.fact.edited": _fact_edited,
    "memory.fact.forgotten": _fact_forgotten,
    "import.started": _import_started,
    "import.finished": _import_finished,
    **projection_people.HANDLERS,
    **projection_contacts.HANDLERS,
    **projection_dates.HANDLERS,
}


def _import_id(payload: dict[str, Any]) -> str | None:
    imported = payload.get("imported")
    import_id = imported.get("import_id") if isinstance(imported, dict) else None
    return import_id if isinstance(import_id, str) else None


def apply(db: sqlite3.Connection, event: Event) -> None:
    """Project one committed event (any kind; most change nothing here)."""
    handler = HANDLERS.get(event.kind)
    if handler is not None:
        handler(db, event)
    elif (import_id := _import_id(event.payload)) is not None:
        # conversation and span events of an import count towards its progress too
        _count_import_event(db, import_id, indexed=False)
