import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.runtime import without_unused_extras

with without_unused_extras():  # httpx's command-line client (click, rich, pygments) is never used here
    from .main import run

if __name__ == "__main__":
    run()
