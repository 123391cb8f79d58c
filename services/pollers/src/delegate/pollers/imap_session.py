"""One IMAP connection (aioimaplib): log in (a password, or XOAUTH2 with an OAuth2 access
token), select the mailbox, list and fetch by UID, and wait for new mail with IDLE where the
server has it.

aioimaplib: the maintained asyncio IMAP4rev1 client with IDLE support; imaplib blocks and
would need a thread per connection. It has no STARTTLS helper (2.0.3 knows the command but
never upgrades the transport), so IMAP_TLS=starttls is refused at startup with the
alternatives: ssl (implicit TLS, port 993, which every provider offers) or none (a local
server only).
"""

import asyncio
import itertools
import logging
import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass

from aioimaplib import aioimaplib

from . import mail_oauth
from .settings import Settings

log = logging.getLogger(__name__)

UID_RE = re.compile(rb"\bUID (\d+)")
SIZE_RE = re.compile(rb"\bRFC822\.SIZE (\d+)")
UIDVALIDITY_RE = re.compile(rb"UIDVALIDITY (\d+)")
# per command: generous, since one FETCH may carry a message of EMAIL_MAX_BYTES on a slow link
COMMAND_TIMEOUT_S = 120.0
CONNECT_TIMEOUT_S = 20.0


class ImapError(Exception):
    """The server refused something or the connection broke: reconnect with backoff."""


class ImapConfigError(Exception):
    """The settings cannot work at all (retrying would not help)."""


def check_settings(settings: Settings) -> None:
    if settings.imap_tls == "starttls":
        raise ImapConfigError(
            "IMAP_TLS=starttls is not supported (aioimaplib has no STARTTLS upgrade): "
            "use IMAP_TLS=ssl (implicit TLS, usually port 993) or IMAP_TLS=none for a local server"
        )


class _Protocol(aioimaplib.IMAP4ClientProtocol):  # type: ignore[misc]  # aioimaplib is untyped
    def _continuation(self, line: bytes) -> None:
        command = self.pending_sync_command
        if command is not None and command.name == "AUTHENTICATE" and self.transport is not None:
            # XOAUTH2 refused: the server sends its error as a challenge and waits for an empty
            # response before its NO (Google's XOAUTH2 protocol); aioimaplib would wait forever
            command.append_to_resp(line)
            self.transport.write(b"\r\n")
            return
        super()._continuation(line)


class _Client(aioimaplib.IMAP4):  # type: ignore[misc]
    """aioimaplib's client with ``_Protocol``; TLS when given an ``ssl_context``."""

    def create_client(self, host: str, port: int, loop: asyncio.AbstractEventLoop | None,
                      conn_lost_cb: Callable[[Exception | None], None] | None = None,
                      ssl_context: ssl.SSLContext | None = None) -> None:
        local_loop = loop if loop is not None else asyncio.get_running_loop()
        self.protocol = _Protocol(local_loop, conn_lost_cb)
        self._client_task = local_loop.create_task(
            local_loop.create_connection(lambda: self.protocol, host, port, ssl=ssl_context)
        )


@dataclass(frozen=True)
class Selected:
    uidvalidity: int
    exists: int


class ImapSession:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.lost = asyncio.Event()
        self.client: aioimaplib.IMAP4 | None = None

    async def open(self) -> Selected:
        check_settings(self.settings)
        s = self.settings
        assert s.imap_host is not None
        try:
            self.client = _Client(
                host=s.imap_host, port=s.imap_port_or_default, timeout=CONNECT_TIMEOUT_S, conn_lost_cb=self._on_lost,
                ssl_context=ssl.create_default_context() if s.imap_tls == "ssl" else None,
            )
            await self.client.wait_hello_from_server()
            tokens = mail_oauth.tokens(s, "imap")
            if tokens is not None:
                login = await self._xoauth2(self.client, tokens)
            else:
                login = await self.client.login(s.imap_user, s.imap_password)
            if login.result != "OK":
                raise ImapError(f"login refused: {_text(login.lines)}")
            self.client.timeout = COMMAND_TIMEOUT_S
            return await self.select()
        except mail_oauth.MailOAuthError as exc:
            raise ImapError(f"IMAP OAuth2: {exc}") from exc
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ImapError(f"connect to {s.imap_host}:{s.imap_port_or_default} failed: {exc!r}") from exc

    async def _xoauth2(self, client: aioimaplib.IMAP4, tokens: mail_oauth.AccessTokens) -> aioimaplib.Response:
        """XOAUTH2 with the current access token; refused, once more with a refreshed one."""
        token = await tokens.current()
        login = await client.xoauth2(self.settings.imap_user, token)
        if login.result != "OK":
            log.info("IMAP refused the access token (%s): refreshing it", _text(login.lines))
            login = await client.xoauth2(self.settings.imap_user, await tokens.after_rejection(token))
        return login

    def _on_lost(self, exc: Exception | None) -> None:
        self.lost.set()

    @property
    def idle_capable(self) -> bool:
        return self.client is not None and self.client.has_capability("IDLE")

    def _c(self) -> aioimaplib.IMAP4:
        if self.client is None or self.lost.is_set():
            raise ImapError("the IMAP connection is closed")
        return self.client

    async def select(self) -> Selected:
        resp = await self._call(self._c().select(self.settings.imap_mailbox))
        if resp.result != "OK":
            raise ImapError(f"SELECT {self.settings.imap_mailbox} refused: {_text(resp.lines)}")
        uidvalidity = exists = None
        for line in resp.lines:
            if isinstance(line, bytes | bytearray):
                if m := UIDVALIDITY_RE.search(line):
                    uidvalidity = int(m.group(1))
                elif line.endswith(b" EXISTS"):
                    exists = int(line.split()[0])
        if uidvalidity is None:
            raise ImapError("SELECT answered without UIDVALIDITY")
        return Selected(uidvalidity, exists or 0)

    async def sizes_after(self, last_uid: int) -> list[tuple[int, int]]:
        """(uid, RFC822.SIZE) of every message with uid > last_uid, in UID order."""
        resp = await self._call(self._c().uid("fetch", f"{last_uid + 1}:*", "(UID RFC822.SIZE)"))
        if resp.result != "OK":
            if b"no messages" in b" ".join(x for x in resp.lines if isinstance(x, bytes)).lower():
                return []
            raise ImapError(f"UID FETCH sizes failed: {_text(resp.lines)}")
        found: dict[int, int] = {}
        for line in resp.lines:
            if isinstance(line, bytes | bytearray) and b"FETCH" in line:
                uid, size = UID_RE.search(line), SIZE_RE.search(line)
                if uid and size:
                    found[int(uid.group(1))] = int(size.group(1))
        # ``n:*`` always includes the newest message even below n: keep only the new ones
        return sorted((uid, size) for uid, size in found.items() if uid > last_uid)

    async def fetch(self, uid: int, part: str = "BODY.PEEK[]") -> bytes | None:
        """The raw message (or its header with ``BODY.PEEK[HEADER]``); None if it vanished."""
        resp = await self._call(self._c().uid("fetch", str(uid), f"(UID {part})"))
        if resp.result != "OK":
            raise ImapError(f"UID FETCH {uid} failed: {_text(resp.lines)}")
        lines = resp.lines
        for line, nxt in itertools.pairwise(lines):
            if isinstance(line, bytes) and b"FETCH" in line and isinstance(nxt, bytearray):
                m = UID_RE.search(line)
                if m is None or int(m.group(1)) == uid:
                    return bytes(nxt)
        return None

    async def wait_for_mail(
        self, timeout: float, stop: asyncio.Event, on_idle: Callable[[], None] | None = None
    ) -> None:
        """Block in IDLE until the server pushes something, ``timeout`` passes, ``stop`` is set
        or the connection drops (raised as ImapError). ``on_idle`` runs once the server has
        accepted IDLE: only from then on is new mail pushed."""
        client = self._c()
        try:
            idle = await client.idle_start(timeout=timeout)
        except (aioimaplib.AioImapException, OSError) as exc:
            raise ImapError(f"IDLE refused: {exc!r}") from exc
        if on_idle is not None:
            on_idle()
        push = asyncio.ensure_future(client.wait_server_push(timeout=timeout + 30))
        waiters = [push, asyncio.ensure_future(stop.wait()), asyncio.ensure_future(self.lost.wait())]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if self.lost.is_set():
            raise ImapError("the IMAP connection dropped while idling")
        if push.done() and not push.cancelled() and push.exception() is not None:
            log.debug("idle wait ended: %r", push.exception())
        try:
            client.idle_done()
            await asyncio.wait_for(idle, 10.0)
        except (TimeoutError, aioimaplib.AioImapException, OSError) as exc:
            raise ImapError(f"leaving IDLE failed: {exc!r}") from exc

    async def noop(self) -> None:
        resp = await self._call(self._c().noop())
        if resp.result != "OK":
            raise ImapError(f"NOOP failed: {_text(resp.lines)}")

    async def close(self) -> None:
        client, self.client = self.client, None
        if client is None:
            return
        try:
            if not self.lost.is_set():
                await asyncio.wait_for(client.logout(), 5.0)
        except Exception as exc:  # closing a broken session: nothing left to save
            log.debug("logout failed: %r", exc)
        transport = client.protocol.transport if client.protocol is not None else None
        if transport is not None:
            transport.close()

    async def _call(self, coro: "asyncio.Future[aioimaplib.Response] | object") -> aioimaplib.Response:
        try:
            return await coro  # type: ignore[misc]
        except (OSError, TimeoutError, aioimaplib.AioImapException) as exc:
            raise ImapError(f"IMAP command failed: {exc!r}") from exc


def _text(lines: list[object]) -> str:
    return " ".join(x.decode("utf-8", "replace") if isinstance(x, bytes | bytearray) else str(x) for x in lines)[:500]
