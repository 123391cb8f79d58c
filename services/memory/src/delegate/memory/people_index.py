"""Reading people and commitments from the index (each call on the caller's read connection, a
reply of several statements in one snapshot)."""

import json
import sqlite3
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo

from delegate.contracts.people import Commitment, KeyDate, Mention, Person, PersonDetail, PersonFact

from .people import Known, Nominee, resolve
from .reads import snapshot
from .records import from_epoch

UPCOMING_DAYS = 60
RECENT_MENTIONS = 20
STATES = ("open", "kept", "dropped")


def known_people(db: sqlite3.Connection) -> list[Known]:
    """Everyone identity resolution compares against, forgotten people included."""
    return [
        Known(
            id=r["id"], name=r["name"], aliases=json.loads(r["aliases"]), phones=json.loads(r["phones"]),
            emails=json.loads(r["emails"]), status=r["status"], relation=r["relation"], dates=json.loads(r["dates"]),
        )
        for r in db.execute("SELECT * FROM people ORDER BY seq")
    ]


def match(db: sqlite3.Connection, phones: list[str], emails: list[str]) -> str | None:
    """The active person with one of these phones or emails (exact, as ``people.resolve``)."""
    nominee = Nominee(name="", phones=phones, emails=emails)
    found = resolve(nominee, [p for p in known_people(db) if p.status == "active"])
    return found.id if found else None


def next_occurrence(value: str, today: date, zone: ZoneInfo) -> datetime | None:
    """The next day (today included) a ``MM-DD`` or ``YYYY-MM-DD`` date falls on, at local midnight."""
    month, day = (int(x) for x in value[-5:].split("-"))
    for year in (today.year, today.year + 1, today.year + 2, today.year + 3, today.year + 4):
        try:
            when = date(year, month, day)  # 29 February: the next leap year
        except ValueError:
            continue
        if when >= today:
            return datetime.combine(when, time.min, zone)
    return None


def _dates(raw: str, today: date, zone: ZoneInfo) -> list[KeyDate]:
    return [KeyDate(label=d["label"], date=d["date"], next=next_occurrence(d["date"], today, zone))
            for d in json.loads(raw)]


def _person(db: sqlite3.Connection, r: sqlite3.Row, today: date, zone: ZoneInfo) -> Person:
    facts = db.execute("SELECT count(*) FROM person_facts WHERE person_id = ?", (r["id"],)).fetchone()[0]
    seen = db.execute("SELECT count(*), max(ts) FROM person_mentions WHERE person_id = ?", (r["id"],)).fetchone()
    listed = db.execute("SELECT max(listed) FROM person_sources WHERE person_id = ?", (r["id"],)).fetchone()[0]
    return Person(
        id=r["id"], name=r["name"], aliases=json.loads(r["aliases"]), relation=r["relation"],
        phones=json.loads(r["phones"]), emails=json.loads(r["emails"]), dates=_dates(r["dates"], today, zone),
        facts=facts, mentions=seen[0], last_mentioned=from_epoch(seen[1]) if seen[1] is not None else None,
        created_at=from_epoch(r["created_at"]), updated_at=from_epoch(r["updated_at"]),
        contacts=None if listed is None else "listed" if listed else "unlisted",
    )


def list_people(db: sqlite3.Connection, *, now: datetime, zone: ZoneInfo, limit: int) -> list[Person]:
    today = now.astimezone(zone).date()
    with snapshot(db):
        rows = db.execute(
            "SELECT * FROM people WHERE status = 'active' ORDER BY updated_at DESC, seq DESC LIMIT ?", (limit,)
        ).fetchall()
        return [_person(db, r, today, zone) for r in rows]


def person_detail(db: sqlite3.Connection, person_id: str, *, now: datetime, zone: ZoneInfo) -> PersonDetail | None:
    with snapshot(db):
        return _detail(db, person_id, now, zone)


def _detail(db: sqlite3.Connection, person_id: str, now: datetime, zone: ZoneInfo) -> PersonDetail | None:
    r = db.execute("SELECT * FROM people WHERE id = ? AND status = 'active'", (person_id,)).fetchone()
    if r is None:
        return None
    today = now.astimezone(zone).date()
    base = _person(db, r, today, zone)
    facts = [
        PersonFact(id=f["id"], text=f["text"], type=f["type"], event_ids=json.loads(f["event_ids"]))
        for f in db.execute(
            "SELECT f.* FROM person_facts pf JOIN facts f ON f.id = pf.fact_id"
            " WHERE pf.person_id = ? AND f.status = 'active' ORDER BY f.valid_at DESC",
            (person_id,),
        )
    ]
    mentions = [
        Mention(event_id=m["event_id"], ts=from_epoch(m["ts"]), channel=m["channel"], text=m["text"])
        for m in db.execute(
            "SELECT pm.event_id, pm.ts, m.channel, m.text FROM person_mentions pm"
            " LEFT JOIN messages m ON m.event_id = pm.event_id WHERE pm.person_id = ? ORDER BY pm.ts DESC LIMIT ?",
            (person_id, RECENT_MENTIONS),
        )
    ]
    horizon = datetime.combine(today + timedelta(days=UPCOMING_DAYS), time.min, zone)
    upcoming = sorted((d for d in base.dates if d.next is not None and d.next < horizon),
                      key=lambda d: d.next or horizon)
    return PersonDetail(**base.model_dump(), linked_facts=facts, recent_mentions=mentions, upcoming=upcoming)


def _commitment(r: sqlite3.Row) -> Commitment:
    return Commitment(
        id=r["id"], by=r["by"], what=r["what"], to=r["to_name"], person_id=r["person_id"],
        due=from_epoch(r["due"]) if r["due"] is not None else None, due_text=r["due_text"], state=r["state"],
        event_ids=json.loads(r["event_ids"]), made_at=from_epoch(r["made_at"]),
        closed_at=from_epoch(r["closed_at"]) if r["closed_at"] is not None else None, reason=r["reason"],
        due_fired=bool(r["due_fired"]),
    )


def list_commitments(db: sqlite3.Connection, *, state: str, limit: int) -> list[Commitment]:
    """Open ones soonest due first (undated last); closed ones most recently closed first."""
    states = STATES if state == "all" else (state,)
    marks = ",".join("?" * len(states))
    rows = db.execute(
        f"SELECT * FROM commitments WHERE state IN ({marks})"
        " ORDER BY state = 'open' DESC, due IS NULL, due, closed_at DESC, seq LIMIT ?",
        (*states, limit),
    ).fetchall()
    return [_commitment(r) for r in rows]


def commitment(db: sqlite3.Connection, commitment_id: str) -> Commitment | None:
    r = db.execute("SELECT * FROM commitments WHERE id = ?", (commitment_id,)).fetchone()
    return _commitment(r) if r else None


def people_applied(db: sqlite3.Connection, event_id: str) -> bool:
    return db.execute("SELECT 1 FROM people_log WHERE event_id = ?", (event_id,)).fetchone() is not None
