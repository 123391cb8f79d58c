"""Web Push pieces the gateway and the pollers share: the VAPID key pair, the subscription
bucket, and the endpoint check.

- The VAPID key pair (RFC 8292) is made once and kept at ``RUNTIME_DATA_DIR/push/vapid.pem``
  (mode 0600): the gateway hands out its public half, the pollers sign with it. Two processes
  starting together agree on one key (the file is linked into place, never overwritten).
  Services that share no runtime dir are given the same key in PUSH_VAPID_PRIVATE_KEY.
- Subscriptions live in the KV bucket ``PUSH_SUBSCRIPTIONS_BUCKET`` (every gateway sees each
  browser's, the pollers read them when they send).
- An endpoint must be https on a public address: real push services are, and a subscription
  is otherwise a way to make the server post to the owner's LAN. A local receiver is allowed
  only through an explicit setting (PUSH_ALLOW_PRIVATE_ENDPOINTS, for tests and development).
"""

import asyncio
import base64
import ipaddress
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue
from pydantic import ValidationError

from delegate.contracts import subjects
from delegate.contracts.push import PushSubscription

from .bus import Bus

if TYPE_CHECKING:
    # Loaded with the key's first use (the key endpoint, a push sent), not with this module: the
    # gateway imports it to start, and cryptography's bindings and py_vapid were ~12 ms of its CPU.
    from py_vapid import Vapid02

VAPID_FILE = Path("push") / "vapid.pem"
KV_TIMEOUT_S = 3.0


def load_vapid(runtime_dir: Path, configured: str | None = None) -> "Vapid02":
    """The server's VAPID key: the one configured (PUSH_VAPID_PRIVATE_KEY: PEM, or base64url raw
    or DER, for services that share no runtime dir), else the file, made on first use and
    readable by this user only."""
    from py_vapid import Vapid02

    if configured:
        text = configured.strip()
        return Vapid02.from_pem(text.encode()) if "BEGIN" in text else Vapid02.from_string(text)
    path = runtime_dir / VAPID_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fresh = Vapid02()
        fresh.generate_keys()
        pem = fresh.private_pem()
        tmp = path.with_name(f".vapid.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, pem)
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)  # fails if another process won the race: its key is the key
        except FileExistsError:
            pass
        finally:
            tmp.unlink(missing_ok=True)
    return Vapid02.from_pem(path.read_bytes())


def public_key(vapid: "Vapid02") -> str:
    """The ``applicationServerKey`` a browser subscribes with: the raw P-256 point, base64url."""
    from cryptography.hazmat.primitives import serialization

    raw = vapid.public_key.public_bytes(
        serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
    )
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


class EndpointRefused(ValueError):
    pass


def _address_refusal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str | None:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_private or address.is_link_local or address.is_multicast \
            or address.is_reserved or address.is_unspecified or not address.is_global:
        return f"{address} is not a public address"
    return None


def check_endpoint_url(endpoint: str, allow_private: bool) -> tuple[str, int]:
    """The endpoint's host and port if its form is acceptable; raises ``EndpointRefused``."""
    try:
        parts = urlsplit(endpoint)
        port = parts.port
    except ValueError as exc:
        raise EndpointRefused("the endpoint is not a URL") from exc
    host = parts.hostname
    if not host or parts.username or parts.password:
        raise EndpointRefused("the endpoint must be an https URL with a host and no credentials")
    if parts.scheme != "https" and not (allow_private and parts.scheme == "http"):
        raise EndpointRefused("the endpoint must be https")
    if not allow_private:
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None and (why := _address_refusal(literal)):
            raise EndpointRefused(why)
        if host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
            raise EndpointRefused(f"{host} is not a public host")
    return host, port or (443 if parts.scheme == "https" else 80)


async def check_endpoint(endpoint: str, allow_private: bool) -> None:
    """Refuse an endpoint that is not https or whose host resolves to a non-public address
    (checked again before every send: a name may be pointed elsewhere later)."""
    host, port = check_endpoint_url(endpoint, allow_private)
    if allow_private:
        return
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise EndpointRefused(f"{host} does not resolve") from exc
    for info in infos:
        if why := _address_refusal(ipaddress.ip_address(info[4][0])):
            raise EndpointRefused(f"{host} resolves to {why.split(' ', 1)[1]}: {info[4][0]}")


class SubscriptionsUnavailable(Exception):
    """The subscription bucket cannot be read or written now (NATS is away)."""


class PushStore:
    """The subscription bucket: one key per browser (its subscription id)."""

    def __init__(self) -> None:
        self._kv: KeyValue | None = None
        self._js: JetStreamContext | None = None

    async def open(self, bus: Bus) -> None:
        self._js = bus.js
        try:
            self._kv = await bus.js.key_value(subjects.PUSH_SUBSCRIPTIONS_BUCKET)
        except nats.js.errors.BucketNotFoundError:
            try:
                self._kv = await bus.js.create_key_value(
                    bucket=subjects.PUSH_SUBSCRIPTIONS_BUCKET, history=1, replicas=bus.replicas
                )
            except nats.js.errors.BadRequestError:  # the other side created it meanwhile
                self._kv = await bus.js.key_value(subjects.PUSH_SUBSCRIPTIONS_BUCKET)

    def _bucket(self) -> KeyValue:
        if self._kv is None:
            raise SubscriptionsUnavailable("not connected to NATS yet")
        return self._kv

    async def put(self, sub: PushSubscription) -> None:
        try:
            await asyncio.wait_for(self._bucket().put(sub.id, sub.model_dump_json().encode()), KV_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            raise SubscriptionsUnavailable(repr(exc)) from exc

    async def get(self, sub_id: str) -> PushSubscription | None:
        try:
            entry = await asyncio.wait_for(self._bucket().get(sub_id), KV_TIMEOUT_S)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):  # deleted: its marker
            return None
        except (nats.errors.Error, TimeoutError) as exc:
            raise SubscriptionsUnavailable(repr(exc)) from exc
        try:
            return PushSubscription.model_validate_json(entry.value or b"")
        except ValidationError:
            return None

    async def delete(self, sub_id: str) -> None:
        try:
            await asyncio.wait_for(self._bucket().delete(sub_id), KV_TIMEOUT_S)
        except (nats.errors.Error, TimeoutError) as exc:
            raise SubscriptionsUnavailable(repr(exc)) from exc

    async def all(self) -> list[PushSubscription]:
        # The bucket's stream lists its subjects, one per key ever written (a deleted one's marker
        # too: get() says None for it). Not KeyValue.keys(): nats-py's watcher can mark its start
        # done before the entries already on their way arrive (the consumer has none pending,
        # none delivered yet), so under load keys() said "no keys" for a bucket that had some,
        # and a sign-out's listing left a browser subscribed (tests/gateway/test_push_api.py).
        self._bucket()  # opened
        assert self._js is not None
        prefix = f"$KV.{subjects.PUSH_SUBSCRIPTIONS_BUCKET}."
        try:
            info = await asyncio.wait_for(  # a bucket's stream is KV_<bucket> (the KV protocol's name)
                self._js.stream_info(f"KV_{subjects.PUSH_SUBSCRIPTIONS_BUCKET}", subjects_filter=f"{prefix}>"),
                KV_TIMEOUT_S,
            )
        except (nats.errors.Error, TimeoutError) as exc:
            raise SubscriptionsUnavailable(repr(exc)) from exc
        keys = sorted(subject[len(prefix):] for subject in (info.state.subjects or {}))
        found = [await self.get(key) for key in keys]
        return [sub for sub in found if sub is not None]

    async def delete_session(self, session: str) -> int:
        """Sign-out: the subscriptions that session made end with it."""
        gone = [sub for sub in await self.all() if sub.session == session]
        for sub in gone:
            await self.delete(sub.id)
        return len(gone)

    async def delete_all(self) -> None:
        """"Sign out everywhere": no browser is pushed to any more."""
        for sub in await self.all():
            await self.delete(sub.id)
