"""The address books on the calendar's server, read with the ``caldav`` client's own WebDAV
requests (same login, same OAuth2 bearer tokens, same TLS rules as the calendar): PROPFIND
finds the address books and each card's ETag, addressbook-multiget reads the cards whose
ETag changed.

``caldav`` is synchronous: every call here runs on a worker thread.
"""

import asyncio
from typing import Any
from urllib.parse import urljoin, urlsplit
from xml.sax.saxutils import escape

from caldav.lib import error as dav_error
from niquests.auth import AuthBase

from ..calendar.server import CalendarUnavailable, dav_client
from ..settings import Settings

DAV = "{DAV:}"
CARD = "{urn:ietf:params:xml:ns:carddav}"
HOME_BODY = ('<?xml version="1.0"?><d:propfind xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:carddav">'
             "<d:prop><c:addressbook-home-set/></d:prop></d:propfind>")
MULTIGET_BATCH = 200
LIST_BODY = ('<?xml version="1.0"?><d:propfind xmlns:d="DAV:"><d:prop><d:resourcetype/><d:displayname/>'
             "<d:getetag/></d:prop></d:propfind>")


class CardDav:
    def __init__(self, settings: Settings, auth: AuthBase | None = None) -> None:
        self.settings = settings
        self.client = dav_client(settings, auth)

    def close(self) -> None:
        self.client.close()

    async def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return await asyncio.to_thread(fn, *args)
        except (dav_error.DAVError, OSError, ConnectionError) as exc:
            raise CalendarUnavailable(f"address book: {exc}") from exc
        except Exception as exc:  # niquests' own errors: a server that is down or answers nonsense
            raise CalendarUnavailable(f"address book: {type(exc).__name__}: {exc}") from exc

    async def address_books(self) -> dict[str, str]:
        """URL -> display name of the address books CONTACTS_ADDRESSBOOKS names (all when empty)."""
        found: dict[str, str] = await self._run(self._address_books)
        wanted = [w.strip() for w in self.settings.contacts_addressbooks.split(",") if w.strip()]
        if not wanted:
            return found
        return {url: name for url, name in found.items() if name in wanted or url in wanted or url.rstrip("/") in
                [w.rstrip("/") for w in wanted]}

    def _address_books(self) -> dict[str, str]:
        principal = str(self.client.principal().url)
        homes = [principal]
        for _, props in self._propfind(principal, HOME_BODY, 0):
            home = props.find(f"{CARD}addressbook-home-set/{DAV}href")
            if home is not None and home.text:
                homes = [urljoin(principal, home.text.strip())]
        books: dict[str, str] = {}
        for home in homes:
            for href, props in self._propfind(home, LIST_BODY, 1):
                kinds = props.find(f"{DAV}resourcetype")
                if kinds is not None and kinds.find(f"{CARD}addressbook") is not None:
                    name = props.findtext(f"{DAV}displayname") or href.rstrip("/").rsplit("/", 1)[-1]
                    books[href] = name.strip()
        return books

    def _propfind(self, url: str, body: str, depth: int) -> list[tuple[str, Any]]:
        return self._request(url, "PROPFIND", body, depth)

    def _request(self, url: str, method: str, body: str, depth: int) -> list[tuple[str, Any]]:
        """The 200 props of each response of a multistatus, by absolute href."""
        response = self.client.request(url, method, body, {"Depth": str(depth), "Content-Type": "application/xml"})
        if response.status not in (200, 207):
            raise dav_error.DAVError(f"{method} {url}: {response.status} {response.reason}")
        out: list[tuple[str, Any]] = []
        for item in response.tree.iter(f"{DAV}response") if response.tree is not None else []:
            href = item.findtext(f"{DAV}href")
            if not href:
                continue
            for propstat in item.iter(f"{DAV}propstat"):
                status = propstat.findtext(f"{DAV}status") or ""
                prop = propstat.find(f"{DAV}prop")
                if " 200" in status and prop is not None:
                    out.append((urljoin(url, href.strip()), prop))
        return out

    async def etags(self, book: str) -> dict[str, str]:
        """href -> ETag of every card in the address book."""
        return dict(await self._run(self._etags, book))

    def _etags(self, book: str) -> dict[str, str]:
        cards: dict[str, str] = {}
        for href, props in self._propfind(book, LIST_BODY, 1):
            if href.rstrip("/") == book.rstrip("/"):
                continue
            kinds = props.find(f"{DAV}resourcetype")
            if kinds is not None and len(kinds):
                continue  # a collection inside, not a card
            cards[href] = (props.findtext(f"{DAV}getetag") or "").strip()
        return cards

    async def cards(self, book: str, hrefs: list[str]) -> dict[str, str]:
        """href -> vCard text, by addressbook-multiget (RFC 6352 8.7): an XML answer, so no card
        is logged by the client as "not XML", and one request for many cards."""
        found: dict[str, str] = {}
        for start in range(0, len(hrefs), MULTIGET_BATCH):
            found.update(await self._run(self._multiget, book, hrefs[start:start + MULTIGET_BATCH]))
        return found

    def _multiget(self, book: str, hrefs: list[str]) -> dict[str, str]:
        paths = "".join(f"<d:href>{escape(urlsplit(h).path)}</d:href>" for h in hrefs)
        body = ('<?xml version="1.0"?><c:addressbook-multiget xmlns:d="DAV:" xmlns:c="urn:ietf:params:xml:ns:carddav">'
                f"<d:prop><d:getetag/><c:address-data/></d:prop>{paths}</c:addressbook-multiget>")
        found: dict[str, str] = {}
        for href, props in self._request(book, "REPORT", body, 1):
            data = props.findtext(f"{CARD}address-data")
            if data:
                found[href] = data
        return found
