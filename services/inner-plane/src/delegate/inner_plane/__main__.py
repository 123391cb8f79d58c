import delegate.runtime.bus  # noqa: F401 - first: nats-py without its unused aiohttp (see there)
from delegate.inner_plane.main import run

if __name__ == "__main__":
    run()
