"""What a service needs of the NATS server, checked against the server it reached.

An older nats-server does not refuse what it does not know: 2.9 creates a stream asked to
allow message schedules (it drops the field), stores a ``Nats-Schedule`` message and never
fires it, and stores an atomic batch's messages one by one. A service that relies on such a
feature asks first (``Bus.require_server``) and refuses to start, naming the version it found
and the one it needs, instead of failing silently later.

The check is by version: the server's INFO names it on every connection, where a feature
probe would need a stream of its own to try.
"""

import asyncio
import contextlib
import logging
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from nats.aio.client import Client
from nats.aio.subscription import Subscription

from delegate.contracts.streams import StreamSpec

from .errors import quietly

log = logging.getLogger(__name__)

Version = tuple[int, int, int]

# While refusing, how often the server is looked at again: after an upgrade the client
# reconnects to the new server by itself, and the service then starts without a restart.
RECHECK_S = 5.0

_VERSION = re.compile(r"v?(\d+)\.(\d+)\.(\d+)")


@dataclass(frozen=True)
class ServerFeature:
    name: str
    since: Version
    why: str  # what of ours relies on it, in the operator's words

    @property
    def since_text(self) -> str:
        return ".".join(str(n) for n in self.since)


MESSAGE_SCHEDULES = ServerFeature("JetStream message schedules", (2, 12, 0), "reminders fire from them")
ATOMIC_BATCHES = ServerFeature(
    "JetStream atomic batch publish", (2, 12, 0), "an import stores each conversation whole or not at all"
)


class ServerUnsuitable(Exception):
    """The connected nats-server lacks features we need; the message says which and what to run."""

    def __init__(self, found: str, lacking: Sequence[ServerFeature]) -> None:
        needed = max(f.since for f in lacking)
        what = "; ".join(f"{f.name} ({f.why}) came in {f.since_text}" for f in lacking)
        super().__init__(
            f"nats-server {found} is too old: {what}. "
            f"Run nats-server {'.'.join(str(n) for n in needed)} or newer (NATS_URL names the server)"
        )
        self.found = found
        self.lacking = tuple(lacking)


def stream_features(specs: Iterable[StreamSpec]) -> tuple[ServerFeature, ...]:
    """What the servers' support of these streams' settings takes."""
    needs: list[ServerFeature] = []
    for spec in specs:
        if spec.schedules and MESSAGE_SCHEDULES not in needs:
            needs.append(MESSAGE_SCHEDULES)
        if spec.atomic and ATOMIC_BATCHES not in needs:
            needs.append(ATOMIC_BATCHES)
    return tuple(needs)


def server_version(nc: Client) -> tuple[str, Version | None]:
    """The connected server's version as its INFO says it, and as numbers (None when unreadable).

    A pre-release counts as its release (2.12.0-RC.1 as 2.12.0): its features are in it.
    """
    text = str(nc._server_info.get("version") or "")  # nats-py keeps the last INFO, renewed on reconnect
    match = _VERSION.match(text)
    return text or "(unknown)", (int(match[1]), int(match[2]), int(match[3])) if match else None


def check_server(nc: Client, features: Iterable[ServerFeature]) -> None:
    """Raise ``ServerUnsuitable`` when the connected server is older than a feature needs.

    A version that is not semver (a custom build) is let through with a warning: we cannot
    tell, and refusing a server that works would be worse than the silent failure.
    """
    features = tuple(features)
    if not features:
        return
    text, numbers = server_version(nc)
    if numbers is None:
        log.warning("cannot read nats-server version %r; assuming it has %s", text, ", ".join(f.name for f in features))
        return
    lacking = [f for f in features if numbers < f.since]
    if lacking:
        raise ServerUnsuitable(text, lacking)


class Pinged(Protocol):
    """What ``start_when_server_suits`` uses of a ``Bus``: its client and its ping answer."""

    nc: Client

    async def serve_ping(
        self, service: str, ready: Callable[[], bool] | None = None, detail: str = "", refusal: str = ""
    ) -> Subscription: ...


async def start_when_server_suits(
    bus: Pinged, service: str, features: Sequence[ServerFeature], stop: asyncio.Event
) -> bool:
    """True once the connected server has ``features``; False if ``stop`` comes first.

    Until then the service starts nothing: it logs why, answers its ping not ready with the
    reason as its ``refusal`` (the gateway's /readyz shows it), and looks again now and then.
    """
    try:
        check_server(bus.nc, features)
        return True
    except ServerUnsuitable as exc:
        refusal = str(exc)
    log.error("refusing to start: %s", refusal)
    sub = await bus.serve_ping(service, ready=lambda: False, detail=refusal, refusal=refusal)
    try:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RECHECK_S)
            if stop.is_set():
                return False
            try:
                check_server(bus.nc, features)
            except ServerUnsuitable:
                continue
            log.info("nats-server %s has what this service needs: starting", server_version(bus.nc)[0])
            return True
    finally:
        await quietly(sub.unsubscribe())
