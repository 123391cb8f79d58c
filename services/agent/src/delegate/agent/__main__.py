import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.runtime import without_unused_extras

with without_unused_extras():  # the OpenAI SDK's aiohttp client and httpx's CLI are never used here
    from delegate.agent import main

if __name__ == "__main__":
    main.run()
