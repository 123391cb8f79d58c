# pywebpush (the Web Push sender) sends with aiohttp: loaded before the guard below, which hides
# only what is not loaded yet (twilio's async client gets it the same way)
import aiohttp  # noqa: F401

import delegate.runtime.bus  # noqa: F401 - nats-py, the way every service loads it first
from delegate.runtime import without_unused_extras

with without_unused_extras():  # httpx's command-line client (click, rich, pygments) is never used here
    from .main import run

if __name__ == "__main__":
    run()
