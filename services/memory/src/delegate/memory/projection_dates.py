"""Key dates offered as yearly reminders, in the index (issue #30), so none is offered twice.

A date learned in a turn (``person.added``/``person.updated``) is offered by the inner plane,
one ``person.date`` signal each: it counts as offered here from that event on. A date an
address book import brings is held as pending until the import's ``contacts.synced``; then all
the pending dates never offered become one ``person.dates`` signal (``date_offers.py`` raises
it; its id derives from the ``contacts.synced`` event, so a replay raises the same one), so a
whole address book asks the owner once. All of it in the follower's transaction, by event id.
"""

import json
import sqlite3
from collections.abc import Iterable

from delegate.contracts.events import Event
from delegate.contracts.signals import ImportedDate, PersonDatesPayload, PersonDatesSignal

from .ids import derived_id

SOURCE = "contacts"
MAX_LISTED = 1000  # dates named in one offer; ``count`` says how many came in all


def batch_signal_id(synced_event_id: str) -> str:
    return derived_id("person-dates", synced_event_id)


def mark_offered(db: sqlite3.Connection, person_id: str, dates: Iterable[dict[str, str]]) -> None:
    for d in dates:
        key = (person_id, d.get("label", "date"), d.get("date", ""))
        db.execute("INSERT OR IGNORE INTO dates_offered (person_id, label, date) VALUES (?,?,?)", key)
        db.execute("DELETE FROM dates_pending WHERE person_id = ? AND label = ? AND date = ?", key)


def pend(db: sqlite3.Connection, person_id: str, dates: Iterable[dict[str, str]]) -> None:
    """Dates a card brought: pending until the import ends, unless offered already."""
    for d in dates:
        key = (person_id, d.get("label", "date"), d.get("date", ""))
        offered = db.execute(
            "SELECT 1 FROM dates_offered WHERE person_id = ? AND label = ? AND date = ?", key
        ).fetchone()
        if offered is None:
            db.execute("INSERT OR IGNORE INTO dates_pending (person_id, label, date) VALUES (?,?,?)", key)


def drop_pending(db: sqlite3.Connection, person_id: str) -> None:
    db.execute("DELETE FROM dates_pending WHERE person_id = ?", (person_id,))


def _contacts_synced(db: sqlite3.Connection, event: Event) -> None:
    rows = db.execute(
        "SELECT d.person_id, p.name, d.label, d.date FROM dates_pending d JOIN people p ON p.id = d.person_id"
        " WHERE p.status = 'active' ORDER BY p.name COLLATE NOCASE, d.person_id, d.label"
    ).fetchall()
    db.execute("DELETE FROM dates_pending")
    if not rows:
        return
    assert event.seq is not None
    signal = PersonDatesSignal(
        id=batch_signal_id(event.id), ts=event.ts, source=SOURCE, urgency="low",
        dedup_key=f"person-dates:{event.id}",
        payload=PersonDatesPayload(
            count=len(rows),
            dates=[ImportedDate(person_id=r["person_id"], name=r["name"], label=r["label"], date=r["date"])
                   for r in rows[:MAX_LISTED]],
        ),
    )
    db.execute(
        "INSERT OR IGNORE INTO date_batches (signal_id, seq, signal) VALUES (?,?,?)",
        (signal.id, event.seq, signal.model_dump_json()),
    )
    for r in rows:
        mark_offered(db, r["person_id"], [{"label": r["label"], "date": r["date"]}])


def _inner_signal(db: sqlite3.Connection, event: Event) -> None:
    db.execute("DELETE FROM date_batches WHERE signal_id = ?", (event.id,))  # raised: committed once
    if event.payload.get("signal_kind") != "person.date":
        return
    signal = event.payload.get("signal")
    payload = signal.get("payload") if isinstance(signal, dict) else None
    if isinstance(payload, dict) and payload.get("person_id"):
        mark_offered(db, str(payload["person_id"]), [{"label": str(payload.get("label", "date")),
                                                      "date": str(payload.get("date", ""))}])


def unsent(db: sqlite3.Connection) -> list[PersonDatesSignal]:
    """The offers made and not yet seen committed as signals, oldest first."""
    return [PersonDatesSignal.model_validate(json.loads(r[0]))
            for r in db.execute("SELECT signal FROM date_batches ORDER BY seq")]


HANDLERS = {"contacts.synced": _contacts_synced, "inner.signal": _inner_signal}
