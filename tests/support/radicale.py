"""A real CalDAV server for tests: Radicale as a subprocess, on a free port, storing in a temp
folder, with htpasswd logins (the settings take a user and a password, so the tests use them).

``url`` goes through a small relay in this process, so a test can hold the answer to the next
PUT after Radicale stored it (``hold_next_put``): the calendar service then sees its write
vanish into a crash window, as a lost connection would leave it. ``direct_url`` is Radicale
itself: "someone else" changes events there (``Owner``), as the owner's phone would.
"""

import http.client
import subprocess
import sys
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from caldav.calendarobjectresource import Event
from caldav.collection import Calendar
from caldav.davclient import DAVClient

from delegate.launcher.procs import free_port, wait_for_port

from .http_thread import HttpThread

USER = "owner"
PASSWORD = "calendar-secret"
CALENDAR = "Personal"


class RadicaleServer:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.relay: HttpThread | None = None
        self.puts: list[str] = []  # paths PUT through the relay (the service's writes)
        self._hold = threading.Event()
        self.held = threading.Event()  # a PUT reached Radicale and its answer is being held

    @property
    def direct_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    @property
    def url(self) -> str:
        assert self.relay is not None, "start() first"
        return self.relay.url + "/"

    def start(self, timeout: float = 20.0) -> "RadicaleServer":
        self.root.mkdir(parents=True, exist_ok=True)
        users = self.root / "users"
        users.write_text(f"{USER}:{PASSWORD}\n")
        log = (self.root / "radicale.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "radicale", "--server-hosts", f"127.0.0.1:{self.port}",
             "--storage-filesystem-folder", str(self.root / "collections"),
             "--auth-type", "htpasswd", "--auth-htpasswd-filename", str(users),
             "--auth-htpasswd-encryption", "plain", "--rights-type", "owner_only",
             "--logging-level", "warning"],
            stdout=log, stderr=subprocess.STDOUT,
        )
        wait_for_port(self.port, timeout, proc=self.proc)
        self.relay = HttpThread(_relay_handler(self), "radicale-relay")
        return self

    def hold_next_put(self) -> None:
        self._hold.set()

    def release(self) -> None:
        self._hold.clear()

    def stop(self) -> None:
        self._hold.clear()
        if self.relay is not None:
            self.relay.stop()
            self.relay = None
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None

    def owner(self) -> "Owner":
        return Owner(self.direct_url)


class Owner:
    """The owner's other devices: reads and changes the calendar on Radicale directly."""

    def __init__(self, url: str) -> None:
        self.client = DAVClient(url=url, username=USER, password=PASSWORD, require_tls=False)
        principal = self.client.get_principal()
        calendars = principal.calendars()
        assert isinstance(calendars, list)  # a sync client's principal answers at once, never a coroutine
        found = [c for c in calendars if c.get_display_name() == CALENDAR]
        made = found[0] if found else principal.make_calendar(name=CALENDAR)
        assert isinstance(made, Calendar)
        self.calendar = made

    def close(self) -> None:
        self.client.close()

    def add(self, ics_body: str) -> str:
        """Store a VEVENT (or several, one UID) given as its VCALENDAR text; returns its UID."""
        event = self.calendar.save_event(ical=ics_body)
        assert isinstance(event, Event)
        return str(event.icalendar_component["UID"])

    def events(self) -> list[Any]:
        found = self.calendar.events()
        assert isinstance(found, list)
        return list(found)

    def uids(self) -> list[str]:
        return [str(e.icalendar_component["UID"]) for e in self.events()]

    def by_uid(self, uid: str) -> Any:
        return self.calendar.event_by_uid(uid)

    def move(self, uid: str, start: datetime, end: datetime) -> None:
        event = self.by_uid(uid)
        component = event.icalendar_component
        for name in ("DTSTART", "DTEND"):
            del component[name]
        component.add("DTSTART", start.astimezone(UTC))
        component.add("DTEND", end.astimezone(UTC))
        event.save()

    def delete(self, uid: str) -> None:
        self.by_uid(uid).delete()


def vevent(
    summary: str, start: datetime, end: datetime, *, uid: str | None = None, rrule: str | None = None,
    location: str | None = None, attendees: tuple[str, ...] = (), extra: str = "",
) -> str:
    """A VCALENDAR with one VEVENT (``extra``: more components, e.g. a RECURRENCE-ID instance)."""
    lines = [
        "BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//tests//radicale//EN", "BEGIN:VEVENT",
        f"UID:{uid or uuid.uuid4().hex}", f"DTSTAMP:{_utc(datetime.now(UTC))}",
        f"DTSTART:{_utc(start)}", f"DTEND:{_utc(end)}", f"SUMMARY:{summary}",
    ]
    if rrule:
        lines.append(f"RRULE:{rrule}")
    if location:
        lines.append(f"LOCATION:{location}")
    lines.extend(f"ATTENDEE:mailto:{who}" for who in attendees)
    lines.append("END:VEVENT")
    if extra:
        lines.append(extra.strip())
    lines.append("END:VCALENDAR")
    return "\r\n".join(lines) + "\r\n"


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def _relay_handler(server: RadicaleServer) -> type[BaseHTTPRequestHandler]:
    class Relay(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
            try:
                conn.request(self.command, self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
            finally:
                conn.close()
            if self.command == "PUT":
                server.puts.append(urlsplit(self.path).path)
                if server._hold.is_set():
                    server._hold.clear()
                    server.held.set()
                    # Radicale stored it; the answer never comes back (the caller is killed meanwhile)
                    threading.Event().wait(120)
                    return
            self.send_response(response.status, response.reason)
            for key, value in response.getheaders():
                if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_PUT = do_DELETE = do_PROPFIND = do_REPORT = do_OPTIONS = _forward
        do_MKCALENDAR = do_PROPPATCH = do_HEAD = do_POST = do_MKCOL = _forward

    return Relay
