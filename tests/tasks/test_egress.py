"""The browser's egress policy, and the proxy enforcing it against a real HTTP server and client."""

import asyncio
import ipaddress
import socket
from collections.abc import AsyncIterator

import httpx
import pytest

from delegate.tasks.egress import MAX_HEAD, EgressProxy, HostPolicy, IPAddress, address_kind, resolve

from .site import TestSite


def ips(*texts: str) -> list[IPAddress]:
    return [ipaddress.ip_address(text) for text in texts]


# (TASKS_ALLOWED_HOSTS, TASKS_ALLOW_PUBLIC, host, port, resolved addresses, None if allowed or a
# piece of the refusal's reason)
POLICY_CASES = [
    pytest.param("docs.example.com", True, "docs.example.com", 443, ["10.0.0.7"], None, id="listed-any-address"),
    pytest.param("docs.example.com", False, "Docs.Example.COM.", 80, ["127.0.0.1"], None, id="listed-case-and-dot"),
    pytest.param("*.example.org:8443", True, "a.b.example.org", 8443, ["192.168.0.2"], None, id="glob-with-port"),
    pytest.param("*.example.org:8443", True, "a.example.org", 443, ["192.168.0.2"],
                 "a.example.org resolves to 192.168.0.2, a private address, and a.example.org:443 is not in "
                 "TASKS_ALLOWED_HOSTS", id="glob-wrong-port"),
    pytest.param("127.0.0.1:8080", True, "127.0.0.1", 8080, ["127.0.0.1"], None, id="listed-ip-port"),
    pytest.param("127.0.0.1:8080", True, "127.0.0.1", 8081, ["127.0.0.1"],
                 "127.0.0.1 is a loopback address and 127.0.0.1:8081 is not in TASKS_ALLOWED_HOSTS",
                 id="listed-ip-wrong-port"),
    pytest.param("localhost", True, "localhost", 3000, ["::1", "127.0.0.1"], None, id="listed-localhost"),
    pytest.param("[::1]:8080", True, "::1", 8080, ["::1"], None, id="listed-ipv6"),
    pytest.param("[::1]:8080", True, "::1", 9090, ["::1"], "::1 is a loopback address and [::1]:9090",
                 id="ipv6-loopback-wrong-port"),
    pytest.param("", True, "example.com", 443, ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"], None,
                 id="public"),
    pytest.param("", False, "example.com", 443, ["93.184.215.14"], "TASKS_ALLOW_PUBLIC is off", id="public-off"),
    pytest.param("", True, "rebind.test", 80, ["93.184.215.14", "10.1.2.3"],
                 "rebind.test resolves to 10.1.2.3, a private address", id="one-private-answer"),
    pytest.param("", True, "cgnat.test", 80, ["100.64.3.4"], "a shared (CGNAT) address", id="cgnat"),
    pytest.param("", True, "metadata.test", 80, ["169.254.169.254"], "a link-local address", id="link-local"),
    pytest.param("", True, "::ffff:127.0.0.1", 80, ["::ffff:127.0.0.1"],
                 "::ffff:127.0.0.1 is an IPv4-mapped loopback address", id="ipv4-mapped"),
    pytest.param("", True, "v6.test", 80, ["fe80::1"], "a link-local address", id="ipv6-link-local"),
    pytest.param("", True, "v6.test", 80, ["fd12::1"], "a private address", id="ipv6-unique-local"),
    pytest.param("", True, "v6.test", 80, ["fec0::1"], "a site-local address", id="ipv6-site-local"),
    pytest.param("", True, "v6.test", 80, ["2002:7f00:1::1"], "a 6to4 loopback address", id="6to4-loopback"),
    pytest.param("", True, "v6.test", 80, ["64:ff9b::a00:1"], "NAT64 private address", id="nat64-private"),
    pytest.param("", True, "zero.test", 80, ["0.0.0.0"], "an unspecified address", id="unspecified"),
    pytest.param("", True, "mc.test", 80, ["224.0.0.1"], "a multicast address", id="multicast"),
    pytest.param("", True, "res.test", 80, ["240.0.0.1"], "address", id="reserved"),
    pytest.param("", True, "empty.test", 80, [], "resolves to no address", id="no-address"),
]


@pytest.mark.parametrize(("allowed", "public", "host", "port", "addresses", "refused"), POLICY_CASES)
def test_policy(allowed: str, public: bool, host: str, port: int, addresses: list[str], refused: str | None) -> None:
    refusal = HostPolicy.parse(allowed, public).check(host, port, ips(*addresses))
    if refused is None:
        assert refusal is None
    else:
        assert refusal is not None and refused in refusal.reason


@pytest.mark.parametrize("address", ["8.8.8.8", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"])
def test_public_addresses(address: str) -> None:
    assert address_kind(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize(
    "entry", ["http://example.com", "example.com:", "example.com:99999", "example.com:x", "[::1", "[::1]8080",
              "[nothost]:80", "exa mple.com", "ex$ample.com", "a:b:c"],
)
def test_bad_patterns_raise_naming_the_entry(entry: str) -> None:
    with pytest.raises(ValueError, match="TASKS_ALLOWED_HOSTS") as info:
        HostPolicy.parse(f"ok.example.com, {entry}", True)
    assert repr(entry) in str(info.value)


def test_empty_entries_are_ignored() -> None:
    assert len(HostPolicy.parse(" a.test , ,b.test:81,", True).patterns) == 2


# -- the proxy, end to end -------------------------------------------------------------------


Refusals = list[tuple[str, str]]


@pytest.fixture
def refusals() -> Refusals:
    return []


async def started(policy: HostPolicy, refusals: Refusals, **options: object) -> EgressProxy:
    proxy = EgressProxy(policy, on_refusal=lambda target, reason: refusals.append((target, reason)), **options)  # type: ignore[arg-type]
    await proxy.start()
    return proxy


@pytest.fixture
async def listed(site: TestSite, refusals: Refusals) -> AsyncIterator[EgressProxy]:
    """A proxy that allows the site's main port only."""
    proxy = await started(HostPolicy.parse(f"127.0.0.1:{site.port}", True), refusals)
    yield proxy
    await proxy.close()


async def exchange(proxy: EgressProxy, data: bytes) -> bytes:
    """Send raw bytes to the proxy, read until it closes the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
    writer.write(data)
    await writer.drain()
    try:
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


async def test_allowed_request_goes_through(site: TestSite, listed: EgressProxy, refusals: Refusals) -> None:
    async with httpx.AsyncClient(proxy=listed.url) as client:
        page = await client.get(site.url("/a"))
        headers = await client.get(site.url("/headers"), headers={"Proxy-Authorization": "Basic x"})
        posted = await client.post(site.url("/form"), content=b"hello proxy")
    assert page.status_code == 200 and "Apples are red" in page.text
    assert page.headers["connection"] == "close"  # one checked upstream per client connection
    sent = headers.text.lower()
    assert f"host: 127.0.0.1:{site.port}" in sent and "connection: close" in sent
    assert "proxy-authorization" not in sent and "proxy-connection" not in sent
    assert posted.text == "posted 11 bytes: hello proxy"
    assert refusals == []


async def test_chunked_response_is_relayed(site: TestSite, listed: EgressProxy) -> None:
    async with httpx.AsyncClient(proxy=listed.url) as client:
        response = await client.get(site.url("/chunked"))
    assert response.status_code == 200 and response.text == "first second third"


async def test_unreachable_upstream_is_a_502(refusals: Refusals) -> None:
    with socket.socket() as probe:  # a port nothing listens on once this closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proxy = await started(HostPolicy.parse(f"127.0.0.1:{port}", False), refusals)
    try:
        async with httpx.AsyncClient(proxy=proxy.url) as client:
            response = await client.get(f"http://127.0.0.1:{port}/")
    finally:
        await proxy.close()
    assert response.status_code == 502 and f"Could not connect to 127.0.0.1:{port}" in response.text
    assert refusals == []


async def test_unlisted_loopback_is_refused_with_the_reason(site: TestSite, refusals: Refusals) -> None:
    before = site.hits["/a"]
    proxy = await started(HostPolicy.parse("", True), refusals)
    try:
        async with httpx.AsyncClient(proxy=proxy.url) as client:
            response = await client.get(site.url("/a"))
    finally:
        await proxy.close()
    reason = f"127.0.0.1 is a loopback address and 127.0.0.1:{site.port} is not in TASKS_ALLOWED_HOSTS"
    assert response.status_code == 403
    assert reason in response.text
    assert refusals == [(site.url("/a"), reason)]
    assert site.hits["/a"] == before


async def test_connect_tunnels_when_allowed(site: TestSite, listed: EgressProxy) -> None:
    raw = await exchange(listed, (
        f"CONNECT 127.0.0.1:{site.port} HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\n\r\n"
        f"GET /a HTTP/1.1\r\nHost: 127.0.0.1:{site.port}\r\nConnection: close\r\n\r\n"
    ).encode())
    assert raw.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\nHTTP/1.1 200 OK")
    assert b"Apples are red" in raw


async def test_connect_to_unlisted_target_is_refused(site: TestSite, listed: EgressProxy, refusals: Refusals) -> None:
    target = f"127.0.0.1:{site.private_port}"
    raw = await exchange(listed, f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    assert raw.startswith(b"HTTP/1.1 403 Forbidden")
    assert f"127.0.0.1 is a loopback address and {target} is not in TASKS_ALLOWED_HOSTS".encode() in raw
    assert [t for t, _ in refusals] == [target]


async def test_redirect_to_unlisted_port_is_refused(site: TestSite, listed: EgressProxy, refusals: Refusals) -> None:
    async with httpx.AsyncClient(proxy=listed.url, follow_redirects=True) as client:
        response = await client.get(site.url("/redirect-private"))
    assert [r.status_code for r in response.history] == [302]
    assert response.status_code == 403
    assert refusals == [(site.private_url("/secret"), refusals[0][1])]
    assert f"127.0.0.1:{site.private_port} is not in TASKS_ALLOWED_HOSTS" in refusals[0][1]
    assert site.private_hits["/secret"] == 0


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", b"400"),
        (b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),  # origin form: not a proxy request
        (b"GET ftp://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n", b"400"),
        (b"CONNECT nohostport HTTP/1.1\r\nHost: x\r\n\r\n", b"400"),
        (b"GET http://x/ HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_HEAD + b"\r\n\r\n", b"431"),
    ],
    ids=["garbage", "origin-form", "ftp", "connect-no-port", "huge-header"],
)
async def test_malformed_requests_are_rejected(listed: EgressProxy, request_bytes: bytes, status: bytes) -> None:
    raw = await exchange(listed, request_bytes)
    assert raw.split(b" ")[1] == status


async def test_idle_connection_is_closed(refusals: Refusals) -> None:
    proxy = await started(HostPolicy.parse("", True), refusals, idle_timeout=0.3)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed by the proxy, nothing sent
        writer.close()
    finally:
        await proxy.close()


async def test_connects_to_the_address_it_checked(site: TestSite, refusals: Refusals) -> None:
    """Names resolve once, in the proxy, and the connection goes to that answer: here names that
    no real DNS knows, so only the checked address can have been used."""
    lookups: list[str] = []
    answers = {"site.test": "127.0.0.1", "public.test": "10.9.8.7"}

    async def fake_dns(host: str, port: int) -> list[IPAddress]:
        lookups.append(host)
        return ips(answers[host]) if host in answers else await resolve(host, port)

    policy = HostPolicy.parse(f"site.test:{site.port}", True)
    proxy = await started(policy, refusals, resolver=fake_dns)
    try:
        async with httpx.AsyncClient(proxy=proxy.url) as client:
            ok = await client.get(f"http://site.test:{site.port}/headers")
            refused = await client.get("http://public.test/")
    finally:
        await proxy.close()
    assert ok.status_code == 200 and f"host: site.test:{site.port}" in ok.text
    assert refused.status_code == 403
    assert "public.test resolves to 10.9.8.7, a private address, and public.test:80" in refused.text
    assert lookups == ["site.test", "public.test"]
