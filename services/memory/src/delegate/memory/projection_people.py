"""How ``person.*`` and ``commitment.*`` events change the index (see ``projection.py``: run in the
follower's transaction, keyed by event id, so applying one twice changes nothing).

Forgetting a person is done here, in the one transaction of ``person.forgotten``: their links
go, every fact linked to them is forgotten and its sources suppressed, and so is every indexed
turn that names them. Nothing can be left half-forgotten by a crash between two writes.
"""

import json
import sqlite3
from collections.abc import Callable

from delegate.contracts.events import (
    CommitmentDropped,
    CommitmentDue,
    CommitmentKept,
    CommitmentMade,
    Event,
    PersonAdded,
    PersonForgotten,
    PersonMentioned,
    PersonUpdated,
)

from .people import name_key
from .projection_dates import drop_pending, mark_offered
from .query import quoted


def _first(db: sqlite3.Connection, event: Event) -> bool:
    """Record the event as applied; False when it was applied before."""
    assert event.seq is not None
    cur = db.execute("INSERT OR IGNORE INTO people_log (event_id, seq) VALUES (?, ?)", (event.id, event.seq))
    return cur.rowcount == 1


def _merge(old: str, new: list[str]) -> str:
    return json.dumps(list(dict.fromkeys([*json.loads(old), *new])))


def _merge_dates(old: str, new: list[dict[str, str]]) -> str:
    dates: list[dict[str, str]] = json.loads(old)
    for d in new:
        if d not in dates:
            dates.append(d)
    return json.dumps(dates)


def _person_added(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonAdded)
    now = event.ts.timestamp()
    db.execute(
        "INSERT OR IGNORE INTO people (id, name, aliases, relation, phones, emails, dates, status, created_at,"
        " updated_at, seq) VALUES (?,?,?,?,?,?,?, 'active', ?,?,?)",
        (p.person_id, p.name, json.dumps(p.aliases), p.relation, json.dumps(p.phones), json.dumps(p.emails),
         json.dumps(p.dates), now, now, event.seq),
    )
    mark_offered(db, p.person_id, p.dates)  # the inner plane offers each date a turn brings
    _mention(db, p.person_id, p.event_ids, event)


def _person_updated(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonUpdated)
    row = db.execute("SELECT * FROM people WHERE id = ?", (p.person_id,)).fetchone()
    if row is None or row["status"] != "active":
        return  # a forgotten person is not brought back by a late update
    if p.replace:
        values = (p.name or row["name"], json.dumps(p.aliases), p.relation, json.dumps(p.phones),
                  json.dumps(p.emails), json.dumps(p.dates))
    else:
        values = (row["name"], _merge(row["aliases"], p.aliases), row["relation"] or p.relation,
                  _merge(row["phones"], p.phones), _merge(row["emails"], p.emails), _merge_dates(row["dates"], p.dates))
    db.execute(
        "UPDATE people SET name = ?, aliases = ?, relation = ?, phones = ?, emails = ?, dates = ?, updated_at = ?"
        " WHERE id = ?",
        (*values, event.ts.timestamp(), p.person_id),
    )
    mark_offered(db, p.person_id, p.dates)
    _mention(db, p.person_id, p.event_ids, event)


def _mention(db: sqlite3.Connection, person_id: str, event_ids: list[str], event: Event) -> None:
    for event_id in event_ids:
        said = db.execute("SELECT ts FROM messages WHERE event_id = ?", (event_id,)).fetchone()
        db.execute(
            "INSERT OR IGNORE INTO person_mentions (person_id, event_id, ts) VALUES (?,?,?)",
            (person_id, event_id, said[0] if said else event.ts.timestamp()),
        )


def _person_mentioned(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonMentioned)
    row = db.execute("SELECT status FROM people WHERE id = ?", (p.person_id,)).fetchone()
    if row is None or row["status"] != "active":
        return
    for fact_id in p.fact_ids:
        db.execute(
            "INSERT OR IGNORE INTO person_facts (person_id, fact_id, event_id) VALUES (?,?,?)",
            (p.person_id, fact_id, event.id),
        )
    _mention(db, p.person_id, p.event_ids, event)
    db.execute("UPDATE people SET updated_at = ? WHERE id = ?", (event.ts.timestamp(), p.person_id))


def _suppress_ids(db: sqlite3.Connection, event_ids: list[str]) -> None:
    for start in range(0, len(event_ids), 500):
        chunk = event_ids[start:start + 500]
        db.execute(f"UPDATE messages SET suppressed = 1 WHERE event_id IN ({','.join('?' * len(chunk))})", chunk)


def name_match(names: list[str]) -> str | None:
    """An FTS5 query for any of the names as a phrase ("ana costa" OR "ana")."""
    keys = [k for k in dict.fromkeys(name_key(n) for n in names) if k]
    # the message's words and its ``context`` (the turn before it: an answer to a turn naming them
    # is found by that turn's words), not the speaker column
    return "{text context} : (" + " OR ".join(quoted(k) for k in keys) + ")" if keys else None


def _person_forgotten(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonForgotten)
    row = db.execute("SELECT * FROM people WHERE id = ?", (p.person_id,)).fetchone()
    if row is None:
        return
    now = event.ts.timestamp()
    db.execute("UPDATE people SET status = 'forgotten', updated_at = ? WHERE id = ?", (now, p.person_id))
    drop_pending(db, p.person_id)
    facts = [r[0] for r in db.execute("SELECT fact_id FROM person_facts WHERE person_id = ?", (p.person_id,))]
    for fact_id in facts:
        fact = db.execute("SELECT rowid, status, event_ids FROM facts WHERE id = ?", (fact_id,)).fetchone()
        if fact is None:
            continue
        _suppress_ids(db, json.loads(fact["event_ids"]))
        if fact["status"] == "active":
            db.execute("UPDATE facts SET status = 'forgotten', updated_at = ? WHERE id = ?", (now, fact_id))
            db.execute("DELETE FROM facts_fts WHERE rowid = ?", (fact["rowid"],))
            db.execute(
                "INSERT OR IGNORE INTO fact_history (fact_id, seq, kind, event_id, ts, text, by)"
                " VALUES (?,?,?,?,?,?,?)",
                (fact_id, event.seq, "memory.fact.forgotten", event.id, now, p.reason or "person forgotten",
                 p.person_id),
            )
    db.execute("DELETE FROM person_facts WHERE person_id = ?", (p.person_id,))
    mentions = [r[0] for r in db.execute("SELECT event_id FROM person_mentions WHERE person_id = ?", (p.person_id,))]
    _suppress_ids(db, mentions)
    suppress_named(db, [row["name"], *json.loads(row["aliases"])])


def suppress_named(db: sqlite3.Connection, names: list[str], rowid: int | None = None) -> None:
    """Suppress the indexed messages (or the one ``rowid``) naming any of ``names``."""
    match = name_match(names)
    if match is None:
        return
    where = " AND rowid = ?" if rowid is not None else ""
    args: tuple[object, ...] = (match, rowid) if rowid is not None else (match,)
    db.execute(
        "UPDATE messages SET suppressed = 1 WHERE rowid IN"
        f" (SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?{where})",
        args,
    )


def forgotten_names(db: sqlite3.Connection) -> list[str]:
    names: list[str] = []
    for row in db.execute("SELECT name, aliases FROM people WHERE status = 'forgotten'"):
        names.extend([row["name"], *json.loads(row["aliases"])])
    return names


def suppress_if_forgotten(db: sqlite3.Connection, rowid: int) -> None:
    """A new message naming a forgotten person stays out of every model request too."""
    names = forgotten_names(db)
    if names:
        suppress_named(db, names, rowid)


def _commitment_made(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(CommitmentMade)
    db.execute(
        "INSERT OR IGNORE INTO commitments (id, by, what, to_name, person_id, due, due_text, state, event_ids,"
        " made_at, seq) VALUES (?,?,?,?,?,?,?, 'open', ?,?,?)",
        (p.commitment_id, p.by, p.what, p.to, p.person_id, p.due.timestamp() if p.due else None, p.due_text,
         json.dumps(p.event_ids), event.ts.timestamp(), event.seq),
    )


def _commitment_closed(state: str) -> Callable[[sqlite3.Connection, Event], None]:
    def apply(db: sqlite3.Connection, event: Event) -> None:
        if not _first(db, event):
            return
        p = event.typed(CommitmentKept if state == "kept" else CommitmentDropped)
        row = db.execute("SELECT state, event_ids FROM commitments WHERE id = ?", (p.commitment_id,)).fetchone()
        if row is None or row["state"] != "open":
            return  # the first close stands
        db.execute(
            "UPDATE commitments SET state = ?, closed_at = ?, reason = ?, event_ids = ? WHERE id = ?",
            (state, event.ts.timestamp(), p.reason or None, _merge(row["event_ids"], p.event_ids), p.commitment_id),
        )
    return apply


def _commitment_due(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(CommitmentDue)
    db.execute("UPDATE commitments SET due_fired = 1 WHERE id = ?", (p.commitment_id,))


HANDLERS: dict[str, Callable[[sqlite3.Connection, Event], None]] = {
    "person.added": _person_added,
    "person.updated": _person_updated,
    "person.mentioned": _person_mentioned,
    "person.forgotten": _person_forgotten,
    "commitment.made": _commitment_made,
    "commitment.kept": _commitment_closed("kept"),
    "commitment.dropped": _commitment_closed("dropped"),
    "commitment.due": _commitment_due,
}
