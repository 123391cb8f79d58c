"""Where the browser tool may connect: the address policy, and the proxy that enforces it.

Chromium is launched with every request, loopback included, going through `EgressProxy`
(``--proxy-server`` plus ``--proxy-bypass-list=<-loopback>``). For each request the proxy
resolves the host itself, checks every answer against the `HostPolicy`, and connects to the
address it checked, never to the name again: a DNS answer that changes between the check and
the connection (rebinding) cannot reach an address the policy refused. Redirects need nothing
special: Chromium follows one by sending a new request through the proxy, which is checked
like the first.

The proxy is written here rather than taken from a library. The maintained Python proxies do
not fit an embedded, per-connection check of resolved addresses: proxy.py runs its own
threaded or multi-process server with a plugin lifecycle, mitmproxy intercepts TLS (we only
tunnel it) and is a large application, pproxy's rules see host names but not the addresses
the proxy connects to. What remains is small: h11 (the HTTP/1.1 parser httpx is built on)
parses and frames requests, asyncio pipes bytes.

One concept at this length: the address policy and the proxy that enforces it, kept together
so no connection path can skip the check.
"""

import asyncio
import contextlib
import fnmatch
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

import h11

log = logging.getLogger(__name__)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
OnRefusal = Callable[[str, str], None]  # (URL or host:port, reason)

SETTING = "TASKS_ALLOWED_HOSTS"
MAX_HEAD = 64 * 1024  # bytes of request line plus headers
MAX_RESPONSE_HEAD = 256 * 1024  # Chromium's own limit for a response's headers
CHUNK = 64 * 1024
_CGNAT = ipaddress.IPv4Network("100.64.0.0/10")
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_GLOB_HOST = re.compile(r"[a-z0-9*?._-]+")
# Hop-by-hop headers (RFC 9110 7.6.1) and the ones this proxy sets itself.
_HOP_BY_HOP = {
    b"connection", b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate",
    b"te", b"trailer", b"transfer-encoding", b"upgrade", b"host",
}


def hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_kind(address: IPAddress) -> str | None:
    """What makes ``address`` non-public ("loopback", "private", ...), or None if it is public.

    ``is_global`` alone is not enough on Python 3.11: it calls site-local (fec0::/10) and
    6to4 or NAT64 addresses that embed a loopback IPv4 address global, so those are checked
    explicitly, and the IPv4 address inside an IPv6 one decides for it.
    """
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped
        if embedded is not None:
            kind = address_kind(embedded)
            return f"IPv4-mapped {kind}" if kind else None
        if address in _NAT64:
            kind = address_kind(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
            return f"NAT64 {kind}" if kind else None
        if address.sixtofour is not None and (kind := address_kind(address.sixtofour)):
            return f"6to4 {kind}"
        if address.is_site_local:
            return "site-local"
    checks = (
        (address.is_unspecified, "unspecified"),
        (address.is_loopback, "loopback"),
        (address.is_link_local, "link-local"),
        (address.is_multicast, "multicast"),
        (isinstance(address, ipaddress.IPv4Address) and address in _CGNAT, "shared (CGNAT)"),
        (address.is_private, "private"),
        (address.is_reserved, "reserved"),
        (not address.is_global, "non-public"),
    )
    return next((kind for hit, kind in checks if hit), None)


def _show(address: IPAddress) -> str:
    """``::ffff:127.0.0.1`` rather than Python 3.11's ``::ffff:7f00:1``."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return f"::ffff:{address.ipv4_mapped}"
    return str(address)


def _article(word: str) -> str:
    return "an" if word[0] in "aeiouIN" else "a"  # "an IPv4-mapped", "an NAT64" read as letters


@dataclass(frozen=True)
class Refusal:
    target: str  # host:port
    reason: str

    def __str__(self) -> str:
        return self.reason


@dataclass(frozen=True)
class HostPattern:
    text: str  # as written, for messages
    glob: str | None  # a lowercased host-name glob, or
    ip: IPAddress | None  # an IP literal
    port: int | None

    @classmethod
    def parse(cls, entry: str) -> "HostPattern":
        def bad(why: str) -> ValueError:
            return ValueError(f"{SETTING}: bad entry {entry!r}: {why}")

        host, port_text = entry, ""
        if entry.startswith("["):
            inside, bracket, rest = entry[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise bad("an IPv6 address goes in brackets, like [::1]:8080")
            host, port_text = inside, rest[1:]
            if not rest:
                port_text = ""
            elif not port_text:
                raise bad("the port after ':' is missing")
        elif entry.count(":") == 1:
            host, _, port_text = entry.partition(":")
            if not port_text:
                raise bad("the port after ':' is missing")
        port: int | None = None
        if port_text:
            if not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise bad(f"{port_text!r} is not a port (1-65535)")
            port = int(port_text)
        try:
            return cls(entry, None, ipaddress.ip_address(host), port)
        except ValueError:
            if entry.startswith("[") or ":" in host:
                raise bad(f"{host!r} is not an IPv6 address") from None
        glob = host.lower().rstrip(".")
        if not glob.isascii():
            try:
                glob = glob.encode("idna").decode("ascii")
            except UnicodeError:
                raise bad("not a valid international host name") from None
        if not _GLOB_HOST.fullmatch(glob):
            raise bad("a host is letters, digits, '-', '.', '_' and the wildcards '*' and '?'")
        return cls(entry, glob, None, port)

    def matches(self, host: str, ip: IPAddress | None, port: int) -> bool:
        if self.port is not None and self.port != port:
            return False
        if self.ip is not None:
            return ip is not None and ip == self.ip
        return self.glob is not None and fnmatch.fnmatchcase(host, self.glob)


def _literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


@dataclass(frozen=True)
class HostPolicy:
    patterns: tuple[HostPattern, ...]
    allow_public: bool

    @classmethod
    def parse(cls, allowed_hosts: str, allow_public: bool) -> "HostPolicy":
        """``allowed_hosts`` as TASKS_ALLOWED_HOSTS: comma-separated patterns; a bad one raises ValueError."""
        entries = (entry.strip() for entry in allowed_hosts.split(","))
        return cls(tuple(HostPattern.parse(entry) for entry in entries if entry), allow_public)

    def listed(self, host: str, port: int) -> bool:
        name = host.strip("[]").lower().rstrip(".")
        ip = _literal(name)
        return any(pattern.matches(name, ip, port) for pattern in self.patterns)

    def check(self, host: str, port: int, addresses: Sequence[IPAddress]) -> Refusal | None:
        """None if ``host:port``, resolving to ``addresses``, may be reached; else why not."""
        target = hostport(host.strip("[]"), port)
        if self.listed(host, port):
            return None
        if not self.allow_public:
            return Refusal(target, f"{target} is not in {SETTING} (and TASKS_ALLOW_PUBLIC is off)")
        if not addresses:
            return Refusal(target, f"{host} resolves to no address")
        for address in addresses:
            kind = address_kind(address)
            if kind is None:
                continue
            what = f"{_article(kind)} {kind} address"
            if _literal(host.strip("[]")) == address:
                reason = f"{_show(address)} is {what} and {target} is not in {SETTING}"
            else:
                reason = f"{host} resolves to {_show(address)}, {what}, and {target} is not in {SETTING}"
            return Refusal(target, reason)
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order, without repeats."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    found: dict[IPAddress, None] = {}
    for *_, sockaddr in infos:
        found.setdefault(ipaddress.ip_address(sockaddr[0]), None)
    return list(found)


class _Reply(Exception):
    """End the client's request with this status and text."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status, self.text = status, text


_PHRASES = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large", 502: "Bad Gateway",
            504: "Gateway Timeout"}


class EgressProxy:
    """An HTTP forward proxy on 127.0.0.1 that lets through only what `HostPolicy` allows.

    Plain HTTP comes as absolute-form requests (forwarded in origin form with
    ``Connection: close``, one request per connection); HTTPS and WebSockets come as
    ``CONNECT host:port`` (tunnelled). A refused request gets a 403 whose body says why, after
    ``on_refusal(target, reason)`` was called (target: the URL, or host:port for CONNECT).
    """

    def __init__(
        self,
        policy: HostPolicy,
        *,
        on_refusal: OnRefusal | None = None,
        resolver: Resolver = resolve,
        idle_timeout: float = 60.0,
        connect_timeout: float = 10.0,
    ) -> None:
        self.policy = policy
        self.on_refusal = on_refusal
        self.resolver = resolver
        self.idle_timeout = idle_timeout
        self.connect_timeout = connect_timeout
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the egress proxy is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> "EgressProxy":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass
        except asyncio.CancelledError:
            pass  # close() ends the connection; asyncio's server would log a cancelled handler as an error
        except Exception:
            log.exception("egress proxy: connection failed")
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        try:
            event = await self._next_event(conn, reader, head=True)
            if not isinstance(event, h11.Request):
                return  # the client went away before a whole request
            if event.method == b"CONNECT":
                await self._tunnel(conn, event, reader, writer)
            else:
                await self._forward(conn, event, reader, writer)
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint if exc.error_status_hint in _PHRASES else 400
            await _reply(writer, status, f"Malformed request: {exc}")
        except _Reply as reply:
            await _reply(writer, reply.status, reply.text)

    async def _next_event(self, conn: h11.Connection, reader: asyncio.StreamReader, head: bool = False) -> object:
        received = 0
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            if head and received > MAX_HEAD:
                # h11 bounds only what it holds unparsed, which a head arriving in one piece never is
                raise _Reply(431, f"The request head is over {MAX_HEAD} bytes")
            data = await asyncio.wait_for(reader.read(MAX_HEAD + 1 - received if head else CHUNK), self.idle_timeout)
            received += len(data)
            conn.receive_data(data)

    async def _open(self, target: str, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """Resolve, check, connect to the checked address; `_Reply` when that is not possible."""
        try:
            addresses = await asyncio.wait_for(self.resolver(host, port), self.connect_timeout)
        except (OSError, TimeoutError) as exc:
            raise _Reply(502, f"Could not resolve {host}: {exc}") from None
        refusal = self.policy.check(host, port, addresses)
        if refusal is not None:
            log.info("egress proxy: refused %s: %s", target, refusal.reason)
            if self.on_refusal is not None:
                try:
                    self.on_refusal(target, refusal.reason)
                except Exception:
                    log.exception("egress proxy: on_refusal failed")
            raise _Reply(403, f"Refused by Delegate's egress policy: {refusal.reason}")
        errors = []
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(str(address), port), self.connect_timeout)
            except (OSError, TimeoutError) as exc:
                errors.append(f"{hostport(str(address), port)}: {exc or 'timed out'}")
        raise _Reply(502, f"Could not connect to {hostport(host, port)} ({'; '.join(errors)})")

    async def _tunnel(
        self, conn: h11.Connection, request: h11.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        authority = request.target.decode("ascii", "replace")
        host, _, port_text = authority.rpartition(":")
        host = host.removeprefix("[").removesuffix("]")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise _Reply(400, f"CONNECT needs host:port, not {authority!r}")
        port = int(port_text)
        up_reader, up_writer = await self._open(hostport(host, port), host, port)
        early, _ = conn.trailing_data  # bytes the client sent after the CONNECT head, if any
        try:
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            if early:
                up_writer.write(early)
            await self._pipe_both(reader, writer, up_reader, up_writer)
        finally:
            up_writer.close()

    async def _forward(
        self, conn: h11.Connection, request: h11.Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        url = request.target.decode("ascii", "replace")
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise _Reply(400, f"This is a forward proxy: send absolute http:// URLs (or CONNECT), not {url!r}")
        try:
            port = parts.port or 80
        except ValueError:
            raise _Reply(400, f"Bad port in {url!r}") from None
        authority = parts.netloc.rpartition("@")[2]
        up_reader, up_writer = await self._open(url, parts.hostname, port)
        try:
            upstream = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_RESPONSE_HEAD)
            headers = [(b"host", authority.encode()), *_end_to_end(request.headers), (b"connection", b"close")]
            if any(k == b"transfer-encoding" for k, _ in request.headers):
                headers.append((b"transfer-encoding", b"chunked"))  # h11 de-chunked the body; chunk it again
            path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
            up_writer.write(upstream.send(h11.Request(method=request.method, target=path, headers=headers)) or b"")
            body = asyncio.create_task(self._send_body(conn, reader, upstream, up_writer))
            try:
                await self._relay_response(conn, writer, upstream, up_reader)
            finally:
                body.cancel()
                await asyncio.wait([body])
                if not body.cancelled():
                    body.exception()  # a client gone mid-body: nothing more to do
        finally:
            up_writer.close()

    async def _relay_response(
        self, conn: h11.Connection, writer: asyncio.StreamWriter, upstream: h11.Connection,
        up_reader: asyncio.StreamReader,
    ) -> None:
        """Parse the upstream's response and send it on, marked ``Connection: close``: the client
        must not reuse this connection, whose upstream is the one checked for this request."""
        started = False
        try:
            while True:
                event = await self._next_event(upstream, up_reader)
                if isinstance(event, h11.InformationalResponse):
                    writer.write(conn.send(event) or b"")
                elif isinstance(event, h11.Response):
                    headers = [*_end_to_end(event.headers), (b"connection", b"close")]
                    writer.write(conn.send(h11.Response(status_code=event.status_code, headers=headers,
                                                        reason=event.reason)) or b"")
                    started = True
                elif isinstance(event, h11.Data):
                    writer.write(conn.send(event) or b"")
                    await writer.drain()
                elif isinstance(event, h11.EndOfMessage):
                    writer.write(conn.send(event) or b"")
                    await writer.drain()
                    return
                else:
                    raise h11.RemoteProtocolError("the connection closed before a response")
        except (h11.ProtocolError, ConnectionError, TimeoutError) as exc:
            if started:
                return  # the client sees a cut-off response
            if isinstance(exc, TimeoutError):
                raise _Reply(504, "The upstream server did not answer in time") from None
            raise _Reply(502, f"Bad response from the upstream server: {exc}") from None

    async def _send_body(
        self, conn: h11.Connection, reader: asyncio.StreamReader, upstream: h11.Connection,
        up_writer: asyncio.StreamWriter,
    ) -> None:
        while True:
            event = await self._next_event(conn, reader)
            if isinstance(event, h11.Data):
                up_writer.write(upstream.send(h11.Data(data=event.data)) or b"")
                await up_writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                up_writer.write(upstream.send(h11.EndOfMessage()) or b"")
                await up_writer.drain()
                return
            else:
                return

    async def _pipe_both(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
        up_reader: asyncio.StreamReader, up_writer: asyncio.StreamWriter,
    ) -> None:
        clock = _Clock(self.idle_timeout)
        try:
            async with asyncio.TaskGroup() as group:  # one side failing ends the other
                group.create_task(_pipe(reader, up_writer, clock))
                group.create_task(_pipe(up_reader, writer, clock))
        except* (ConnectionError, TimeoutError):
            pass


class _Clock:
    """One idle clock for both directions of a connection: a long download with nothing sent
    the other way is busy, not idle."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._loop = asyncio.get_running_loop()
        self._last = self._loop.time()

    def touch(self) -> None:
        self._last = self._loop.time()

    def left(self) -> float:
        return self._last + self.timeout - self._loop.time()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter, clock: _Clock) -> None:
    """Copy until ``source`` ends (then half-close ``sink``); TimeoutError when the clock runs out."""
    while True:
        try:
            data = await asyncio.wait_for(source.read(CHUNK), max(clock.left(), 0.001))
        except TimeoutError:
            if clock.left() <= 0:
                raise
            continue  # the other direction moved meanwhile
        if not data:
            if sink.can_write_eof() and not sink.is_closing():
                sink.write_eof()
            return
        clock.touch()
        sink.write(data)
        await sink.drain()


def _end_to_end(headers: Sequence[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """``headers`` without the hop-by-hop ones, including those the Connection header names."""
    named = {token.strip().lower() for name, value in headers if name == b"connection" for token in value.split(b",")}
    return [(name, value) for name, value in headers if name not in _HOP_BY_HOP and name not in named]


async def _reply(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    body = (text + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {_PHRASES.get(status, 'Error')}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Cache-Control: no-store\r\n"
        "Connection: close\r\n\r\n"
    )
    with contextlib.suppress(ConnectionError):
        writer.write(head.encode() + body)
        await writer.drain()
