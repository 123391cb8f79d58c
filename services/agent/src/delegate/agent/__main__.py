import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.runtime import without_aiohttp

with without_aiohttp():  # the OpenAI SDK's optional aiohttp client is never used here
    from delegate.agent import main

if __name__ == "__main__":
    main.run()
