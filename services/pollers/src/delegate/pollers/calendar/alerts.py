"""What the calendar raises on its own: ``calendar.upcoming`` before an event with a place or
other people, and the morning agenda at AGENDA_AT, once per day.

Each alert is published under an id derived from what it is about (the occurrence and its
start, or the day), then remembered in the projection: a crash in between publishes the same
id again (JetStream drops the copy, and the inner plane records a signal once by its id), and
a restart after it raises nothing twice. The broker then applies quiet hours, the interruption
budget and dedup as for every signal.
"""

import logging
from datetime import datetime, timedelta

from delegate.contracts import topics
from delegate.contracts.signals import (
    CalendarAgenda,
    CalendarAgendaPayload,
    CalendarUpcoming,
    CalendarUpcomingPayload,
)

from .sync import SOURCE, CalendarSync, derived_id, ref

log = logging.getLogger(__name__)
AGENDA_LATEST = timedelta(hours=6)  # after a longer outage the morning agenda is no longer worth sending
AGENDA_MAX = 50


async def raise_due(sync: CalendarSync) -> None:
    now = sync.clock()
    await _upcoming(sync, now)
    await _agenda(sync, now)


async def _upcoming(sync: CalendarSync, now: datetime) -> None:
    lead = timedelta(seconds=sync.settings.calendar_upcoming_lead_s)
    for occurrence, _ in sync.projection.between(now, now + lead + timedelta(seconds=1), 200):
        if occurrence.all_day or occurrence.start < now or occurrence.start - lead > now:
            continue
        if not (occurrence.location or occurrence.attendees):
            continue
        key = f"upcoming\n{occurrence.key}\n{occurrence.start.isoformat()}"
        if sync.projection.raised(key):
            continue
        signal_id = derived_id("calup", key)
        signal = CalendarUpcoming(
            id=signal_id, ts=now, source=SOURCE, dedup_key=signal_id, expires_at=occurrence.start,
            reply_via=sync.settings.calendar_reply_via,
            payload=CalendarUpcomingPayload(
                event=ref(occurrence), lead_s=max((occurrence.start - now).total_seconds(), 0)
            ),
        )
        await sync.bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
        sync.projection.mark_raised(key, now)
        log.info("calendar: upcoming %r at %s", occurrence.summary, occurrence.start.isoformat())


async def _agenda(sync: CalendarSync, now: datetime) -> None:
    at = sync.settings.agenda_time
    if at is None or sync.synced_at is None:  # an agenda from an unsynced projection would be wrong
        return
    local = now.astimezone(sync.zone)
    due = datetime.combine(local.date(), at, sync.zone)
    if not due <= local < due + AGENDA_LATEST:
        return
    day = local.date().isoformat()
    key = f"agenda\n{day}"
    if sync.projection.raised(key):
        return
    start = datetime.combine(local.date(), datetime.min.time(), sync.zone)
    rows = sync.projection.between(start, start + timedelta(days=1), AGENDA_MAX + 1)
    signal_id = derived_id("calday", key)
    signal = CalendarAgenda(
        id=signal_id, ts=now, source=SOURCE, dedup_key=signal_id, expires_at=due + AGENDA_LATEST,
        reply_via=sync.settings.calendar_reply_via,
        payload=CalendarAgendaPayload(
            day=day, events=[ref(o) for o, _ in rows[:AGENDA_MAX]], more=max(len(rows) - AGENDA_MAX, 0)
        ),
    )
    await sync.bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
    sync.projection.mark_raised(key, now)
    log.info("calendar: the agenda of %s (%d event(s))", day, len(rows))
