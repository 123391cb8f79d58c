"""How ``person.imported`` (a contact read from the owner's CardDAV address book) changes the
index, in the follower's transaction like every projection (``projection_people.py``).

Identity is resolved here, by code, with the rules of ``people.resolve``: the contact already
imported (by address book and vCard UID) is that person; else a person with one of its phones
or emails, or its name, is; else it is someone new, with an id derived from the contact so a
replay makes the same person. A re-import replaces what the previous import of that contact
said (a number edited on the phone goes, the new one comes) and keeps what turns and the
owner's edits added. A forgotten person is never made again by their card.

A card deleted from the address book (``person.unlisted``) takes back what it said that no
other listed card of the person says (phones, emails, dates): those no longer identify them.
Their names, the facts the turns linked and the owner's edits stay; the person is shown as no
longer in contacts until a card of theirs is listed again.
"""

import json
import sqlite3
from typing import Any

from delegate.contracts.events import Event, PersonImported, PersonUnlisted

from .ids import derived_id
from .people import Nominee, email_key, name_key, phone_key, resolve
from .people_index import known_people
from .projection_dates import pend
from .projection_people import _first


def _card(p: PersonImported) -> dict[str, Any]:
    return {"names": [p.name, *p.aliases], "phones": p.phones, "emails": [e.strip().lower() for e in p.emails],
            "dates": p.dates}


def _replace(current: list[Any], before: list[Any], now: list[Any], key: Any = lambda v: v) -> list[Any]:
    """``current`` without what the last import brought (unless this one brings it again), plus
    this import's."""
    gone = {key(v) for v in before} - {key(v) for v in now}
    kept = [v for v in current if key(v) not in gone]
    have = {key(v) for v in kept}
    return kept + [v for v in now if key(v) not in have]


def _person_imported(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonImported)
    card = _card(p)
    link = db.execute(
        "SELECT person_id, imported FROM person_sources WHERE source = ? AND contact_uid = ?", (p.source, p.contact_uid)
    ).fetchone()
    if link is not None:
        person_id, before = link["person_id"], json.loads(link["imported"])
    else:
        found = resolve(Nominee(p.name, list(p.aliases), None, list(p.phones), list(p.emails)), known_people(db))
        person_id = found.id if found else derived_id("person", f"{p.source}\n{p.contact_uid}")
        before = {"names": [], "phones": [], "emails": [], "dates": []}
    db.execute(
        "INSERT INTO person_sources (source, contact_uid, person_id, imported, listed) VALUES (?,?,?,?,1)"
        " ON CONFLICT (source, contact_uid) DO UPDATE SET imported = excluded.imported, listed = 1",
        (p.source, p.contact_uid, person_id, json.dumps(card)),
    )
    now = event.ts.timestamp()
    row = db.execute("SELECT * FROM people WHERE id = ?", (person_id,)).fetchone()
    if row is None:
        db.execute(
            "INSERT INTO people (id, name, aliases, relation, phones, emails, dates, status, created_at, updated_at,"
            " seq) VALUES (?,?,?, NULL, ?,?,?, 'active', ?,?,?)",
            (person_id, p.name, json.dumps(list(p.aliases)), json.dumps(card["phones"]), json.dumps(card["emails"]),
             json.dumps(card["dates"]), now, now, event.seq),
        )
        pend(db, person_id, card["dates"])
        return
    if row["status"] != "active":
        return  # forgotten: the card is remembered as theirs, and makes nobody
    names = _replace([row["name"], *json.loads(row["aliases"])], before["names"], card["names"], name_key)
    # the card's name leads when the person's own name came from the card or is gone from it
    name = p.name if row["name"] in before["names"] or row["name"] not in names else row["name"]
    aliases = [n for n in names if name_key(n) != name_key(name)]
    phones = _replace(json.loads(row["phones"]), before["phones"], card["phones"], phone_key)
    emails = _replace(json.loads(row["emails"]), before["emails"], card["emails"], email_key)
    dates = _replace(json.loads(row["dates"]), before["dates"], card["dates"], lambda d: (d["label"], d["date"]))
    db.execute(
        "UPDATE people SET name = ?, aliases = ?, phones = ?, emails = ?, dates = ?, updated_at = ? WHERE id = ?",
        (name, json.dumps(aliases[:20]), json.dumps(phones[:20]), json.dumps(emails[:20]), json.dumps(dates[:20]),
         now, person_id),
    )
    pend(db, person_id, card["dates"])


def _others(db: sqlite3.Connection, person_id: str, source: str, contact_uid: str) -> dict[str, list[Any]]:
    """What the person's other listed cards say."""
    said: dict[str, list[Any]] = {"names": [], "phones": [], "emails": [], "dates": []}
    for r in db.execute(
        "SELECT imported FROM person_sources WHERE person_id = ? AND listed = 1"
        " AND NOT (source = ? AND contact_uid = ?)",
        (person_id, source, contact_uid),
    ):
        for key, values in json.loads(r["imported"]).items():
            said.setdefault(key, []).extend(values)
    return said


def _gone(current: list[Any], card: list[Any], others: list[Any], key: Any) -> list[Any]:
    drop = {key(v) for v in card} - {key(v) for v in others}
    return [v for v in current if key(v) not in drop]


def _person_unlisted(db: sqlite3.Connection, event: Event) -> None:
    if not _first(db, event):
        return
    p = event.typed(PersonUnlisted)
    link = db.execute(
        "SELECT person_id, imported, listed FROM person_sources WHERE source = ? AND contact_uid = ?",
        (p.source, p.contact_uid),
    ).fetchone()
    if link is None or not link["listed"]:
        return
    person_id, card = link["person_id"], json.loads(link["imported"])
    # the names stay the card's (a card listed again replaces them as an edit would); the rest
    # is said by nobody now
    db.execute(
        "UPDATE person_sources SET listed = 0, imported = ? WHERE source = ? AND contact_uid = ?",
        (json.dumps({"names": card["names"], "phones": [], "emails": [], "dates": []}), p.source, p.contact_uid),
    )
    row = db.execute("SELECT * FROM people WHERE id = ?", (person_id,)).fetchone()
    if row is None or row["status"] != "active":
        return
    others = _others(db, person_id, p.source, p.contact_uid)
    phones = _gone(json.loads(row["phones"]), card["phones"], others["phones"], phone_key)
    emails = _gone(json.loads(row["emails"]), card["emails"], others["emails"], email_key)
    dates = _gone(json.loads(row["dates"]), card["dates"], others["dates"], lambda d: (d["label"], d["date"]))
    db.execute(
        "UPDATE people SET phones = ?, emails = ?, dates = ?, updated_at = ? WHERE id = ?",
        (json.dumps(phones), json.dumps(emails), json.dumps(dates), event.ts.timestamp(), person_id),
    )
    kept = {(d["label"], d["date"]) for d in dates}
    for d in card["dates"]:
        if (d["label"], d["date"]) not in kept:
            db.execute("DELETE FROM dates_pending WHERE person_id = ? AND label = ? AND date = ?",
                       (person_id, d["label"], d["date"]))


HANDLERS = {"person.imported": _person_imported, "person.unlisted": _person_unlisted}
