"""Delegate's shared runtime: bus helper, settings base, lifecycle. Not a service.

``without_unused_extras``: libraries Delegate needs import optional parts it never uses, at module
level, whenever the packages behind them happen to be installed. nats-py and the OpenAI SDK import
aiohttp (~11 MB a process) for a transport Delegate never uses (NATS over WebSockets; the SDK's
opt-in aiohttp HTTP client); httpx imports its command-line client (click, rich and pygments,
~5.5 MB) when those are installed, as they are for the memory service's tooling. Imported under
this guard, each falls back to going without. The bus package imports nats-py under it (every
service's ``__main__`` imports the bus first), so a ``ws://`` NATS_URL is not supported. Twilio's
async client does use aiohttp, and imports it as usual afterwards.

The public surface is ``__all__``: the guard and the modules a service may import (each loads
when imported, never from here: this package is the first every process imports). ``credentials``
is internal (the bus's), and ``bus`` exports its own surface. tests/contracts/test_public_surface.py
fails when the surface changes and its snapshot does not, or when a service imports past it.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager

# The first module each unused part imports: hiding it is enough. Nothing imported under the
# guard may need click itself (uvicorn does: the gateway imports it outside any guard).
UNUSED_EXTRAS = ("aiohttp", "click")

__all__ = [
    "UNUSED_EXTRAS",
    "bus",
    "calendar_now",
    "exits",
    "hard_stop",
    "known_sender",
    "lease",
    "ledger_client",
    "ledger_follower",
    "logs",
    "memory_context",
    "metering",
    "openai_bounds",
    "openai_client",
    "pricing",
    "retry",
    "service",
    "settings",
    "settings_check",
    "settings_source",
    "spend",
    "twilio_rest",
    "validation",
    "webpush",
    "without_unused_extras",
    "working_context",
]


@contextmanager
def without_unused_extras() -> Iterator[None]:
    """Import an SDK (nats, openai, httpx) with its unused optional parts hidden, so it leaves them out."""
    hidden = [name for name in UNUSED_EXTRAS if name not in sys.modules]  # loaded already: nothing to save
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # None makes ``import name`` fail
    try:
        yield
    finally:
        for name in hidden:
            del sys.modules[name]
