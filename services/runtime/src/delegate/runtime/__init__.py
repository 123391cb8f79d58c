"""Delegate's shared runtime: bus helper, settings base, lifecycle. Not a service.

``without_aiohttp``: nats-py, like the OpenAI SDK, imports aiohttp at module level when it is
installed, only for a transport Delegate never uses (NATS over WebSockets; the SDK's opt-in
aiohttp HTTP client): ~11 MB in each of a dozen processes. The bus package imports nats-py
without it (every service's ``__main__`` imports the bus first), so a ``ws://`` NATS_URL is not
supported. Twilio's async client does use aiohttp, and may import it as usual afterwards.
"""

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def without_aiohttp() -> Iterator[None]:
    """Import an SDK (nats, openai) with aiohttp hidden, so its optional aiohttp part is left out."""
    if "aiohttp" in sys.modules:
        yield  # already loaded by someone who needs it: hiding it would save nothing
        return
    sys.modules["aiohttp"] = None  # type: ignore[assignment]  # None makes ``import aiohttp`` fail
    try:
        yield
    finally:
        del sys.modules["aiohttp"]
