"""The contacts worker: every CONTACTS_POLL_S, list each address book's cards with their ETags
and publish a ``person.imported`` for each card that is new or changed since the last pass.

Incremental by ETag (what every CardDAV server offers): the ETags seen are kept in a small
file under RUNTIME_DATA_DIR and written only after the pass's events were published. A crash
in between publishes those cards again under the same event ids (derived from the card's
href and ETag), which the ledger stores once; and applying a card twice changes nothing in
memory anyway. A card that cannot be read is logged and skipped, never fatal.
"""

import asyncio
import hashlib
import json
import logging
import os
from pathlib import Path

from pydantic import ValidationError

from delegate.contracts.events import PersonImported, make_event
from delegate.runtime.bus import Bus, BusUnavailable
from delegate.runtime.ledger_client import LedgerClient, LedgerUnavailable
from delegate.runtime.retry import sleep_unless

from ..calendar.auth import caldav_auth
from ..calendar.server import CalendarUnavailable
from ..settings import Settings
from .carddav import CardDav
from .vcard import BadCard, parse

log = logging.getLogger(__name__)
BACKOFF_MAX_S = 300.0


def import_id(href: str, etag: str) -> str:
    return "cardimp-" + hashlib.sha256(f"{href}\n{etag}".encode()).hexdigest()[:40]


class ContactsSync:
    def __init__(self, settings: Settings, dav: CardDav, ledger: LedgerClient) -> None:
        self.dav, self.ledger = dav, ledger
        self.state_path = settings.runtime_data_dir / "contacts" / "etags.json"
        self.seen: dict[str, str] = self._load()  # card href -> ETag last imported

    def _load(self) -> dict[str, str]:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{self.state_path}.tmp")
        tmp.write_text(json.dumps(self.seen))
        os.replace(tmp, self.state_path)  # whole or not at all

    async def pass_once(self) -> int:
        """Publish the new and changed cards; returns how many were published."""
        published = 0
        before = dict(self.seen)
        for book in await self.dav.address_books():
            etags = await self.dav.etags(book)
            changed = [href for href, etag in etags.items() if not etag or self.seen.get(href) != etag]
            texts = await self.dav.cards(book, changed) if changed else {}
            for href in changed:
                etag = etags[href]
                try:
                    card = parse(texts.get(href, ""))
                    payload = PersonImported(
                        source=book[:200], contact_uid=card.uid, name=card.name, aliases=card.aliases,
                        phones=card.phones, emails=card.emails, dates=card.dates,
                    )
                except (BadCard, ValidationError) as exc:
                    # one odd card is skipped (until it changes), never a worker that crashes on every start
                    log.warning("contacts: skipping %s: %s", href, str(exc)[:300])
                    self.seen[href] = etag
                    continue
                event = make_event(payload, id=import_id(href, etag), conversation_id=None, span_id=None,
                                   channel="inner")
                await self.ledger.publish(event)
                self.seen[href] = etag
                published += 1
        if self.seen != before:
            self._save()
        return published


async def run_contacts(bus: Bus, settings: Settings, stop: asyncio.Event) -> None:
    dav = CardDav(settings, caldav_auth(settings))
    sync = ContactsSync(settings, dav, LedgerClient(bus, "pollers"))
    failures = 0
    try:
        while not stop.is_set():
            try:
                count = await sync.pass_once()
                failures = 0
                if count:
                    log.info("contacts: %d card(s) imported", count)
                wait = settings.contacts_poll_s
            except (CalendarUnavailable, LedgerUnavailable, BusUnavailable) as exc:
                failures += 1
                log.warning("contacts sync failed (%d in a row): %s", failures, exc)
                wait = min(settings.contacts_poll_s * 2 ** min(failures, 8), BACKOFF_MAX_S)
            if not await sleep_unless(stop, wait):
                return
    finally:
        await asyncio.to_thread(dav.close)
