"""The calendar projection: a service-local SQLite file under RUNTIME_DATA_DIR/calendar/.

It is a cache of the CalDAV server, which stays the authority: the resources as last fetched
(with their sync tokens) and their occurrences expanded over the window (30 days back, 60
ahead). Lost or deleted, it is rebuilt by one full sync, so it is not a ledger projection and
the ledger gets only what the timeline needs (``calendar.synced`` counts, ``calendar.changed``).
Alerts already raised (upcoming, the day's agenda) are remembered here too, so a restart does
not raise them again.

One connection, used from the event loop only: every read is an indexed range, well under a
millisecond for a week out of thousands of occurrences.
"""

import json
import sqlite3
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from .ical import Occurrence

SCHEMA = """
CREATE TABLE IF NOT EXISTS resources (
    href TEXT PRIMARY KEY, calendar TEXT NOT NULL, uid TEXT NOT NULL, etag TEXT, ics TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS resources_uid ON resources (uid);
CREATE TABLE IF NOT EXISTS occurrences (
    href TEXT NOT NULL, uid TEXT NOT NULL, okey TEXT NOT NULL, start REAL NOT NULL, end REAL NOT NULL,
    all_day INTEGER NOT NULL, summary TEXT NOT NULL, location TEXT NOT NULL, attendees TEXT NOT NULL,
    recurring INTEGER NOT NULL, occurrence REAL, calendar TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS occurrences_start ON occurrences (start);
CREATE INDEX IF NOT EXISTS occurrences_href ON occurrences (href);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS alerts (key TEXT PRIMARY KEY, at REAL NOT NULL);
"""


def _ts(moment: datetime) -> float:
    return moment.timestamp()


def _dt(value: float) -> datetime:
    return datetime.fromtimestamp(value, UTC)


class Projection:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(path), isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")  # a cache: a lost tail is re-fetched
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # ---- meta -------------------------------------------------------------------------------

    def get(self, key: str) -> str | None:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str | None) -> None:
        if value is None:
            self.db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    # ---- resources --------------------------------------------------------------------------

    def resource(self, href: str) -> tuple[str, str, str] | None:
        """(calendar, uid, ics) of a stored resource."""
        row = self.db.execute("SELECT calendar, uid, ics FROM resources WHERE href = ?", (href,)).fetchone()
        return None if row is None else (str(row[0]), str(row[1]), str(row[2]))

    def href_of(self, uid: str) -> str | None:
        row = self.db.execute("SELECT href FROM resources WHERE uid = ?", (uid,)).fetchone()
        return None if row is None else str(row[0])

    def hrefs(self, calendar: str) -> set[str]:
        return {str(r[0]) for r in self.db.execute("SELECT href FROM resources WHERE calendar = ?", (calendar,))}

    def all_resources(self) -> list[tuple[str, str, str]]:
        """(href, calendar, ics) of every stored resource."""
        return [(str(h), str(c), str(i)) for h, c, i in self.db.execute("SELECT href, calendar, ics FROM resources")]

    def occurrences_of(self, href: str) -> list[Occurrence]:
        rows = self.db.execute(
            "SELECT uid, start, end, all_day, summary, location, attendees, recurring, occurrence "
            "FROM occurrences WHERE href = ?", (href,),
        ).fetchall()
        return [_occurrence(row) for row in rows]

    def store(
        self, href: str, calendar: str, uid: str, etag: str | None, ics: str, found: Iterable[Occurrence]
    ) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT OR REPLACE INTO resources (href, calendar, uid, etag, ics) VALUES (?, ?, ?, ?, ?)",
                (href, calendar, uid, etag, ics),
            )
            self._replace_occurrences(href, calendar, found)

    def reexpand(self, href: str, calendar: str, found: Iterable[Occurrence]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self._replace_occurrences(href, calendar, found)

    def remove(self, href: str) -> None:
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute("DELETE FROM resources WHERE href = ?", (href,))
            self.db.execute("DELETE FROM occurrences WHERE href = ?", (href,))

    def _replace_occurrences(self, href: str, calendar: str, found: Iterable[Occurrence]) -> None:
        self.db.execute("DELETE FROM occurrences WHERE href = ?", (href,))
        self.db.executemany(
            "INSERT INTO occurrences (href, uid, okey, start, end, all_day, summary, location, attendees, recurring, "
            "occurrence, calendar) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (href, o.uid, o.key, _ts(o.start), _ts(o.end), int(o.all_day), o.summary, o.location,
                 json.dumps(list(o.attendees)), int(o.recurring),
                 None if o.occurrence is None else _ts(o.occurrence), calendar)
                for o in found
            ],
        )

    # ---- reads ------------------------------------------------------------------------------

    def between(self, start: datetime, end: datetime, limit: int) -> list[tuple[Occurrence, str]]:
        """Occurrences overlapping [start, end), soonest first, with their calendar."""
        rows = self.db.execute(
            "SELECT uid, start, end, all_day, summary, location, attendees, recurring, occurrence, calendar "
            "FROM occurrences WHERE start < ? AND end > ? OR start = ? ORDER BY start, uid LIMIT ?",
            (_ts(end), _ts(start), _ts(start), limit),
        ).fetchall()
        return [(_occurrence(row[:9]), str(row[9])) for row in rows]

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM occurrences").fetchone()[0])

    # ---- alerts raised ------------------------------------------------------------------------

    def raised(self, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM alerts WHERE key = ?", (key,)).fetchone() is not None

    def mark_raised(self, key: str, at: datetime) -> None:
        self.db.execute("INSERT OR IGNORE INTO alerts (key, at) VALUES (?, ?)", (key, _ts(at)))


def _occurrence(row: tuple[object, ...]) -> Occurrence:
    uid, start, end, all_day, summary, location, attendees, recurring, occurrence = row
    return Occurrence(
        uid=str(uid), start=_dt(float(start)), end=_dt(float(end)), all_day=bool(all_day),  # type: ignore[arg-type]
        summary=str(summary), location=str(location), attendees=tuple(json.loads(str(attendees))),
        recurring=bool(recurring), occurrence=None if occurrence is None else _dt(float(occurrence)),  # type: ignore[arg-type]
    )
