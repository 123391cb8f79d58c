"""One sync pass: what changed on the server goes into the projection, and what someone else
moved or cancelled becomes a ``calendar.changed`` event and signal.

Order makes a crash harmless: the events and signals of a pass are published (under ids derived
from the resource, its new ETag and the new sync token) before the projection and the token are
stored. A pass cut short by a crash is repeated from the old token, finds the same changes, and
publishes the same ids again, which JetStream and the ledger store once.

Delegate's own writes never look like someone else's: the write path stores what it wrote in
the projection before the next pass, so the pass finds the same occurrences and no difference.
"""

import asyncio
import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from delegate.contracts import topics
from delegate.contracts.events import CalendarChanged, CalendarSynced, make_event
from delegate.contracts.signals import CalendarChangedPayload, CalendarChangedSignal, CalendarEventRef
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_client import LedgerClient

from ..settings import Settings
from .ical import BadCalendarData, Occurrence, occurrences, uid_of
from .server import CalDav
from .store import Projection

log = logging.getLogger(__name__)

PAST = timedelta(days=30)
AHEAD = timedelta(days=60)
SOURCE = "calendar"
Clock = Callable[[], datetime]  # aware; injected so the alerts are tested with a moved clock


def derived_id(prefix: str, *parts: str) -> str:
    return f"{prefix}-" + hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def ref(o: Occurrence) -> CalendarEventRef:
    return CalendarEventRef(
        uid=o.uid[:500], summary=o.summary, start=o.start, end=o.end, location=o.location,
        attendees=list(o.attendees),
    )


@dataclass(frozen=True)
class Change:
    kind: str  # "moved" or "cancelled"
    before: Occurrence
    after: Occurrence | None


def differences(before: list[Occurrence], after: list[Occurrence], now: datetime) -> list[Change]:
    """What happened to the occurrences that had not ended yet, soonest first."""
    now_by_key = {o.key: o for o in after}
    out: list[Change] = []
    for old in sorted(before, key=lambda o: o.start):
        if old.end <= now:
            continue
        new = now_by_key.get(old.key)
        if new is None:
            out.append(Change("cancelled", old, None))
        elif (new.start, new.end) != (old.start, old.end):
            out.append(Change("moved", old, new))
    return out


class CalendarSync:
    def __init__(
        self, bus: Bus, settings: Settings, dav: CalDav, projection: Projection, ledger: LedgerClient,
        clock: Clock,
    ) -> None:
        self.bus, self.settings, self.dav, self.projection, self.ledger = bus, settings, dav, projection, ledger
        self.clock = clock
        self.zone = ZoneInfo(settings.owner_timezone)
        self.lock = asyncio.Lock()  # one CalDAV conversation at a time: passes and writes
        self.synced_at: datetime | None = None

    def window(self, now: datetime) -> tuple[datetime, datetime]:
        return now - PAST, now + AHEAD

    def expand(self, ics: str, now: datetime) -> list[Occurrence]:
        start, end = self.window(now)
        return occurrences(ics, start, end, self.zone)

    async def pass_once(self) -> None:
        async with self.lock:
            began = time.perf_counter()
            now = self.clock()
            self._roll_window(now)
            added = changed = removed = 0
            full = False
            for url in list(self.dav.calendars):
                token_key = f"token:{url}"
                found = await self.dav.changes(url, self.projection.get(token_key))
                full = full or found.full
                updates: list[tuple[str, str | None, str, list[Occurrence]]] = []
                notices: list[tuple[str, list[Change]]] = []
                for href, (etag, ics) in found.changed.items():
                    try:
                        new = self.expand(ics, now)
                    except BadCalendarData as exc:
                        log.warning("calendar resource %s skipped: %s", href, exc)
                        continue
                    before = self.projection.resource(href)
                    if before is None:
                        added += 1
                    elif before[2] != ics:
                        changed += 1
                    else:
                        continue
                    updates.append((href, etag, ics, new))
                    if before is not None:
                        notices.append((derived_id("calchg", href, etag or "", found.token or ""),
                                        differences(self.projection.occurrences_of(href), new, now)))
                gone = set(found.deleted)
                if found.full:
                    gone |= self.projection.hrefs(url) - set(found.changed)
                for href in sorted(gone):
                    if self.projection.resource(href) is None:
                        continue
                    removed += 1
                    notices.append((derived_id("calchg", href, "gone", found.token or ""),
                                    differences(self.projection.occurrences_of(href), [], now)))
                for change_id, changes in notices:
                    if changes:
                        await self._tell(change_id, changes)
                for href, etag, ics, new in updates:
                    self.projection.store(href, url, uid_of(ics), etag, ics, new)
                for href in gone:
                    self.projection.remove(href)
                self.projection.put(token_key, found.token)
            self.synced_at = now
            if added or changed or removed or full:
                payload = CalendarSynced(
                    calendars=len(self.dav.calendars), added=added, changed=changed, removed=removed,
                    occurrences=self.projection.count(), full=full,
                    took_ms=round((time.perf_counter() - began) * 1000, 1),
                )
                await self.ledger.publish(make_event(payload, conversation_id=None, span_id=None, channel="inner"))

    def _roll_window(self, now: datetime) -> None:
        """Once a day, the occurrences are expanded again over the window that moved on."""
        today = now.astimezone(self.zone).date().isoformat()
        if self.projection.get("window_day") == today:
            return
        for href, calendar, ics in self.projection.all_resources():
            try:
                self.projection.reexpand(href, calendar, self.expand(ics, now))
            except BadCalendarData:
                continue
        self.projection.put("window_day", today)

    async def _tell(self, change_id: str, changes: list[Change]) -> None:
        first = changes[0]
        kind: Literal["moved", "cancelled"] = "cancelled" if all(c.kind == "cancelled" for c in changes) else "moved"
        lead = next((c for c in changes if c.kind == kind), first)
        payload = CalendarChanged(
            uid=lead.before.uid[:500], change=kind,
            summary=lead.before.summary, old_start=lead.before.start,
            new_start=lead.after.start if lead.after else None, new_end=lead.after.end if lead.after else None,
            occurrences=len(changes),
        )
        event = make_event(payload, id=change_id, conversation_id=None, span_id=None, channel="inner")
        await self.ledger.publish(event)
        signal = CalendarChangedSignal(
            # not the event's id: the inner plane records the signal as an event of its own, by its id
            id=change_id.replace("calchg", "calsig", 1),
            source=SOURCE, dedup_key=change_id, reply_via=self.settings.calendar_reply_via,
            payload=CalendarChangedPayload(
                change=kind,
                event=ref(lead.after or lead.before), old_start=lead.before.start if lead.after else None,
            ),
        )
        await self.bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
        log.info("calendar: %s %r %s (%d occurrence(s))", kind, lead.before.summary, lead.before.uid, len(changes))

