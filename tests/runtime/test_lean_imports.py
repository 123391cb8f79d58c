"""A service starts without aiohttp: nats-py and the OpenAI SDK would each pull it in (~11 MB a
process, for transports Delegate never uses), and Twilio still gets it when it asks.

Each check runs in a fresh interpreter importing the service's ``__main__`` as a module, which is
what ``python -m`` runs before its ``if __name__ == "__main__"`` block starts the service.
"""

import json
import subprocess
import sys

import pytest

SERVICES = ["agent", "gateway", "ledger", "inner_plane", "memory", "tasks", "voice", "pollers"]


def modules_after(code: str) -> dict[str, bool]:
    probe = code + "\nimport json, sys\nprint(json.dumps({m: m in sys.modules for m in ('nats', 'openai', 'aiohttp')}))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_starts_without_aiohttp(service: str) -> None:
    loaded = modules_after(f"import importlib; importlib.import_module('delegate.{service}.__main__')")
    assert loaded["nats"] and not loaded["aiohttp"], loaded


def test_the_openai_sdk_loads_without_aiohttp_and_twilio_still_gets_it() -> None:
    loaded = modules_after(
        "import delegate.runtime.bus\n"
        "from delegate.runtime import without_aiohttp\n"
        "with without_aiohttp():\n"
        "    import openai\n"
        "assert openai.AsyncOpenAI\n"
    )
    assert loaded == {"nats": True, "openai": True, "aiohttp": False}
    loaded = modules_after(
        "import delegate.runtime.bus\nfrom twilio.http.async_http_client import AsyncTwilioHttpClient"
    )
    assert loaded["aiohttp"], loaded
