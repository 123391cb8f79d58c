"""The CalDAV server, through the ``caldav`` client: which calendars, what changed, and writes.

``caldav`` is synchronous (niquests underneath): every call here runs on a worker thread
(``asyncio.to_thread``), one at a time under the caller's lock, so the event loop keeps
answering the agent's reads from the projection meanwhile.

Changes are asked with sync-collection (RFC 6578) where the server offers it; an expired token
or a server without it falls back to a full listing, which ``Changes.full`` says so the
caller also drops what the listing no longer has. Writes go to one resource per event, named
after its UID, with conditional requests: a create never replaces (``If-None-Match: *``) and a
change never overwrites someone else's newer version (``If-Match``).
"""

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import caldav
from caldav.lib import error as dav_error
from niquests.auth import AuthBase

from ..settings import Settings

log = logging.getLogger(__name__)
TIMEOUT_S = 30
MULTIGET_BATCH = 200


class CalendarUnavailable(Exception):
    """The server could not be reached or refused us; the next pass tries again."""


class WriteConflict(Exception):
    """Someone else changed the resource between our read and our write."""


@dataclass
class Changes:
    token: str | None
    full: bool
    changed: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # href -> (etag, ics)
    deleted: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class Resource:
    href: str
    etag: str | None
    ics: str


def dav_client(settings: Settings, auth: AuthBase | None = None) -> Any:
    """The server's WebDAV client (calendars and address books share it): a bearer ``auth``
    (OAuth2) or the configured user and password; TLS required for an https URL."""
    url = settings.caldav_url or ""
    options: dict[str, Any] = {"url": url, "timeout": TIMEOUT_S, "require_tls": url.startswith("https:")}
    if auth is not None:
        options["auth"] = auth
    else:
        options.update(username=settings.caldav_username or None, password=settings.caldav_password or None)
    return caldav.DAVClient(**options)  # type: ignore[operator]


class CalDav:
    def __init__(self, settings: Settings, auth: AuthBase | None = None) -> None:
        self.settings = settings
        self.client = dav_client(settings, auth)
        self.calendars: dict[str, Any] = {}  # url -> caldav Calendar
        self.names: dict[str, str] = {}  # url -> display name
        self.write_url: str | None = None

    def close(self) -> None:
        self.client.close()

    async def discover(self) -> None:
        await self._run(self._discover)

    def _discover(self) -> None:
        principal = self.client.principal()
        found = principal.calendars()
        wanted = [w.strip() for w in self.settings.calendar_read.split(",") if w.strip()]
        calendars: dict[str, Any] = {}
        names: dict[str, str] = {}
        for cal in found:
            url = str(cal.url)
            name = str(cal.get_display_name() or url.rstrip("/").rsplit("/", 1)[-1])
            if wanted and not any(w in (name, url) for w in wanted):
                continue
            calendars[url], names[url] = cal, name
        if not calendars:
            raise CalendarUnavailable(
                "no calendar to read: the account has none" if not wanted
                else f"CALENDAR_READ names none of the account's calendars ({', '.join(sorted(names) or ['none'])})"
            )
        write = self.settings.calendar_write.strip()
        self.write_url = next(
            (url for url, name in names.items() if write in (name, url)), None
        ) if write else next(iter(calendars))
        if write and self.write_url is None:
            all_names = {str(c.get_display_name() or c.url): c for c in found}
            chosen = next((c for n, c in all_names.items() if write in (n, str(c.url))), None)
            if chosen is None:
                raise CalendarUnavailable(f"CALENDAR_WRITE {write!r} is none of the account's calendars")
            self.write_url = str(chosen.url)
            self.calendars[self.write_url] = chosen
        self.calendars.update(calendars)
        self.names.update(names)

    async def changes(self, url: str, token: str | None) -> Changes:
        changes: Changes = await self._run(self._changes, url, token)
        return changes

    def _changes(self, url: str, token: str | None) -> Changes:
        cal = self.calendars[url]
        full = token is None or token.startswith("fake-")
        try:
            result = cal.get_objects_by_sync_token(token, load_objects=False, disable_fallback=not full)
        except (dav_error.ReportError, dav_error.DAVError) as exc:
            log.info("calendar %s: sync token not taken (%s); listing it whole", self.names.get(url, url), exc)
            result, full = cal.get_objects_by_sync_token(None, load_objects=False), True
        new_token = str(result.sync_token) if result.sync_token else None
        if new_token is not None and new_token.startswith("fake-"):
            # caldav's fallback for servers without sync-collection: a non-empty answer is a full listing
            full = bool(result.objects) or full
        out = Changes(token=new_token, full=full)
        deleted = {str(u) for u in getattr(result, "deleted_urls", None) or ()}
        wanted = []
        for obj in result.objects:
            if str(obj.url) in deleted or obj.url.canonical() in deleted:
                out.deleted.add(str(obj.url))
            elif getattr(obj, "data", None):  # the fallback listing carries the data already
                out.changed[str(obj.url)] = (_etag(obj), str(obj.data))
            else:
                wanted.append(obj)
        # what changed, fetched with calendar-multiget (RFC 4791 7.9) a batch at a time, not one GET each
        for first in range(0, len(wanted), MULTIGET_BATCH):
            batch = wanted[first:first + MULTIGET_BATCH]
            loaded = {str(o.url): o for o in cal.multiget([o.url for o in batch])}
            for obj in batch:
                got = loaded.get(str(obj.url)) or _load(obj)  # a URL spelled otherwise: one GET
                if got is None or not got.data:
                    out.deleted.add(str(obj.url))  # gone between the listing and the fetch
                else:
                    out.changed[str(obj.url)] = (_etag(got) or _etag(obj), str(got.data))
        out.deleted |= {d for d in deleted if d not in out.changed}
        return out

    # ---- writes -------------------------------------------------------------------------------

    def href_for(self, uid: str) -> str:
        assert self.write_url is not None, "discover() first"
        return urljoin(self.write_url if self.write_url.endswith("/") else self.write_url + "/", f"{uid}.ics")

    async def fetch(self, href: str) -> Resource | None:
        found: Resource | None = await self._run(self._fetch, href)
        return found

    def _fetch(self, href: str) -> Resource | None:
        response = self.client.request(href, "GET")
        if response.status == 404:
            return None
        _check(response, href)
        return Resource(href, response.headers.get("ETag"), _text(response))

    async def create(self, href: str, ics: str) -> bool:
        """PUT a new resource; False when one is already there (an earlier try of the same call)."""
        created: bool = await self._run(self._put, href, ics, {"If-None-Match": "*"})
        return created

    async def replace(self, resource: Resource, ics: str) -> None:
        headers = {"If-Match": resource.etag} if resource.etag else {}
        if not await self._run(self._put, resource.href, ics, headers):
            raise WriteConflict(f"{resource.href} changed on the server meanwhile")

    def _put(self, href: str, ics: str, headers: dict[str, str]) -> bool:
        response = self.client.request(
            href, "PUT", ics.encode(), {"Content-Type": "text/calendar; charset=utf-8", **headers}
        )
        if response.status == 412:
            return False
        _check(response, href)
        return True

    async def delete(self, resource: Resource) -> bool:
        """DELETE; False when it was already gone."""
        deleted: bool = await self._run(self._delete, resource)
        return deleted

    def _delete(self, resource: Resource) -> bool:
        headers = {"If-Match": resource.etag} if resource.etag else {}
        response = self.client.request(resource.href, "DELETE", "", headers)
        if response.status == 404:
            return False
        if response.status == 412:
            raise WriteConflict(f"{resource.href} changed on the server meanwhile")
        _check(response, resource.href)
        return True

    async def _run(self, fn: Any, *args: Any) -> Any:  # the worker's own result type
        try:
            return await asyncio.to_thread(fn, *args)
        except (CalendarUnavailable, WriteConflict):
            raise
        except (dav_error.DAVError, OSError) as exc:
            raise CalendarUnavailable(f"CalDAV: {exc}") from exc
        except Exception as exc:  # niquests' connection errors and the like: the server is not usable now
            if type(exc).__module__.split(".")[0] in ("niquests", "urllib3", "urllib3_future"):
                raise CalendarUnavailable(f"CalDAV: {exc!r}") from exc
            raise


def _load(obj: Any) -> Any:
    try:
        obj.load()
    except dav_error.NotFoundError:
        return None
    return obj


def _etag(obj: Any) -> str | None:
    props = getattr(obj, "props", None) or {}
    for key, value in props.items():
        if str(key).endswith("getetag"):
            return str(value)
    return None


def _text(response: Any) -> str:
    raw = response.raw if isinstance(response.raw, str) else response.raw.decode()
    return str(raw)


def _check(response: Any, href: str) -> None:
    if response.status >= 300:
        raise CalendarUnavailable(f"CalDAV {href}: HTTP {response.status} {response.reason}")
