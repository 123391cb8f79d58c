"""The contacts worker: every CONTACTS_POLL_S, list each address book's cards with their ETags,
publish a ``person.imported`` for each card that is new or changed since the last pass and a
``person.unlisted`` for each card that is gone, then one ``contacts.synced`` for the pass.

Incremental by ETag (what every CardDAV server offers): what was seen of each card (ETag, UID,
address book) is kept in a small file under RUNTIME_DATA_DIR, written only after the pass's
events were published. A crash in between publishes them again under the same event ids
(derived from the card's href, ETag and how many times it was deleted before), which the
ledger stores once; and applying a card twice changes nothing in memory anyway. A card that
cannot be read is logged and skipped, never fatal. Only the cards of an address book listed in
this pass can be found gone: a book the server did not list is not taken for an empty one.
"""

import asyncio
import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from delegate.contracts.events import ContactsSynced, Payload, PersonImported, PersonUnlisted, make_event
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
STATE_VERSION = 2


def _hash(*parts: str) -> str:
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:40]


def import_id(href: str, etag: str, deleted: int = 0) -> str:
    # ``deleted``: a card deleted and restored with the same content (the same ETag) is a new import
    return "cardimp-" + (_hash(href, etag) if not deleted else _hash(href, etag, str(deleted)))


def unlisted_id(href: str, etag: str, deleted: int) -> str:
    return "cardgone-" + _hash(href, etag, str(deleted))


def synced_id(event_ids: list[str]) -> str:
    return "cardsync-" + _hash(*sorted(event_ids))


class ContactsSync:
    def __init__(self, settings: Settings, dav: CardDav, ledger: LedgerClient) -> None:
        self.dav, self.ledger = dav, ledger
        self.state_path = settings.runtime_data_dir / "contacts" / "etags.json"
        # card href -> {"etag", "uid" ("" for a card that could not be read; None: not known yet),
        # "book"}; and href -> how many times a card there was found deleted
        self.seen: dict[str, dict[str, Any]] = {}
        self.deleted: dict[str, int] = {}
        self._load()

    def _load(self) -> None:
        try:
            data = json.loads(self.state_path.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        if data.get("version") == STATE_VERSION:
            self.seen = {str(k): dict(v) for k, v in data.get("cards", {}).items() if isinstance(v, dict)}
            self.deleted = {str(k): int(v) for k, v in data.get("deleted", {}).items()}
        else:
            # the first layout kept ETags only: each card is read once more to learn its UID
            # (published again under its old id, which the ledger already holds)
            self.seen = {str(k): {"etag": str(v), "uid": None, "book": None} for k, v in data.items()}

    def _save(self) -> None:
        self.state_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(f"{self.state_path}.tmp")
        tmp.write_text(json.dumps({"version": STATE_VERSION, "cards": self.seen, "deleted": self.deleted}))
        os.replace(tmp, self.state_path)  # whole or not at all

    def _fresh(self, href: str, etag: str) -> bool:
        known = self.seen.get(href)
        return known is not None and bool(etag) and known["etag"] == etag and known["uid"] is not None

    async def pass_once(self) -> int:
        """Publish the new, changed and gone cards, then the pass's end; how many cards."""
        published: list[str] = []
        before = json.dumps([self.seen, self.deleted], sort_keys=True)
        counts = {"imported": 0, "unlisted": 0, "birthdays": 0}
        for book in await self.dav.address_books():
            etags = await self.dav.etags(book)
            changed = [href for href, etag in etags.items() if not self._fresh(href, etag)]
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
                    self.seen[href] = {"etag": etag, "uid": "", "book": book}
                    continue
                published.append(await self._publish(payload, import_id(href, etag, self.deleted.get(href, 0))))
                self.seen[href] = {"etag": etag, "uid": card.uid, "book": book}
                counts["imported"] += 1
                counts["birthdays"] += 1 if card.dates else 0
            for href in [h for h, known in self.seen.items() if known.get("book") == book and h not in etags]:
                known = self.seen.pop(href)
                times = self.deleted.get(href, 0)
                if known["uid"]:  # a card never read made nobody, so its going unlists nobody
                    gone = PersonUnlisted(source=book[:200], contact_uid=known["uid"])
                    published.append(await self._publish(gone, unlisted_id(href, known["etag"], times)))
                    counts["unlisted"] += 1
                self.deleted[href] = times + 1
        if published:
            await self._publish(ContactsSynced(**counts), synced_id(published))
        if json.dumps([self.seen, self.deleted], sort_keys=True) != before:
            self._save()
        return counts["imported"] + counts["unlisted"]

    async def _publish(self, payload: Payload, event_id: str) -> str:
        await self.ledger.publish(make_event(payload, id=event_id, conversation_id=None, span_id=None,
                                             channel="inner"))
        return event_id


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
                    log.info("contacts: %d card(s) imported or gone", count)
                wait = settings.contacts_poll_s
            except (CalendarUnavailable, LedgerUnavailable, BusUnavailable) as exc:
                failures += 1
                log.warning("contacts sync failed (%d in a row): %s", failures, exc)
                wait = min(settings.contacts_poll_s * 2 ** min(failures, 8), BACKOFF_MAX_S)
            if not await sleep_unless(stop, wait):
                return
    finally:
        await asyncio.to_thread(dav.close)
