import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.tasks.main import run

if __name__ == "__main__":
    run()
