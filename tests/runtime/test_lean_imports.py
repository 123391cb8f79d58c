"""A service starts without aiohttp: nats-py and the OpenAI SDK would each pull it in (~11 MB a
process, for transports Delegate never uses), and Twilio still gets it when it asks. Nor does
httpx bring its command-line client (click, rich, pygments: ~5.5 MB) where nothing needs click.
A host (every service in one process) loads them as lean, and what a service only needs after
its start (the OpenAI SDK, about a quarter of a host's imports) is not imported before it is ready.

Each check runs in a fresh interpreter importing the service's ``__main__`` as a module, which is
what ``python -m`` runs before its ``if __name__ == "__main__"`` block starts the service.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts processes

SERVICES = ["agent", "gateway", "ledger", "inner_plane", "memory", "tasks", "voice", "pollers"]
# Libraries a service needs only for a request, not to start: each loads with its first use.
# Twilio's TwiML builders (xml.etree) with a call or SMS webhook, jsonschema with an MCP tool or
# a tool call, markdown-it with an email out, html2text with an HTML-only email in, the VAPID key
# (py_vapid, cryptography's bindings) with the push key's endpoint or the first push sent.
FIRST_USE = ("twilio.twiml", "xml.etree.ElementTree", "jsonschema", "markdown_it", "html2text", "py_vapid",
             "cryptography")


def probe_output(code: str, env: dict[str, str] | None = None) -> str:
    """What ``code`` printed, run in a fresh interpreter (which must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def modules_after(code: str, env: dict[str, str] | None = None) -> dict[str, bool]:
    names = ("nats", "openai", "aiohttp", "httpx", "rich", "pygments", "fastapi", "pydantic.v1", *FIRST_USE,
             "delegate.openai_standin.engine")
    probe = code + f"\nimport json, sys\nprint(json.dumps({{m: m in sys.modules for m in {names!r}}}))"
    found: dict[str, bool] = json.loads(probe_output(probe, env).splitlines()[-1])
    return found


def host_loads(services: str, runtime: Path) -> dict[str, bool]:
    """``modules_after`` a host (with an OpenAI key) has loaded ``services`` as it does before
    its first service runs: each one's code and settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "DATABASE_"))}
    env.update(RUNTIME_DATA_DIR=str(runtime), OPENAI_API_KEY="sk-never-sent")
    return modules_after(
        "from delegate.host.catalog import parse\n"
        "from delegate.host.host import _load_all\n"
        f"assert len(_load_all(parse({services!r}))) == len(parse({services!r}))\n",
        env,
    )


@pytest.mark.parametrize("service", SERVICES)
def test_a_service_starts_without_unused_extras(service: str) -> None:
    loaded = modules_after(f"import importlib; importlib.import_module('delegate.{service}.__main__')")
    assert loaded["nats"] and not loaded["aiohttp"], loaded
    assert not loaded["rich"] and not loaded["pygments"], loaded  # httpx's CLI (the pollers load httpx)
    assert not loaded["openai"], loaded  # the SDK loads after the start (LazyOpenAI): the agent preloads it


def test_a_host_loads_every_service_as_lean(tmp_path: Path) -> None:
    """What ``python -m delegate.host --services all,openai-standin`` imports before its first
    service runs: each service's code and settings, as the host loads them."""
    loaded = host_loads("all,openai-standin", tmp_path)
    assert loaded["nats"] and loaded["httpx"] and loaded["fastapi"], loaded  # what they do use
    assert not loaded["aiohttp"], loaded  # nats-py's and the OpenAI SDK's unused transports
    assert not loaded["rich"] and not loaded["pygments"], loaded  # httpx's CLI, though uvicorn loads click
    assert not loaded["openai"], loaded  # about a quarter of a host's import CPU: it loads once the agent leads


@pytest.mark.parametrize("services", ["all", "all,openai-standin"])
def test_a_host_leaves_what_only_a_request_needs_until_it_comes(services: str, tmp_path: Path) -> None:
    """A host, with an OpenAI key or offline with the stand-in beside its services, imports none
    of ``FIRST_USE`` before its services run: together ~0.15 s of a start's CPU, on the one core
    all its services' starts share. Nor the stand-in's app (its routes, engine and OpenAI's
    schemas): it listens first and builds that on its first request."""
    loaded = host_loads(services, tmp_path)
    assert not [name for name in FIRST_USE if loaded[name]], loaded
    assert not loaded["delegate.openai_standin.engine"], loaded


def test_httpx_works_without_its_command_line_client() -> None:
    loaded = modules_after(
        "import delegate.runtime.bus\n"
        "from delegate.runtime import without_unused_extras\n"
        "with without_unused_extras():\n"
        "    import httpx\n"
        "assert httpx.Response(200, json={'ok': True}).json() == {'ok': True}\n"
        "import uvicorn  # outside the guard, click (which uvicorn needs) imports as usual\n"
    )
    assert loaded["httpx"] and not loaded["rich"] and not loaded["pygments"], loaded


def test_the_openai_sdk_loads_without_unused_extras_and_twilio_still_gets_it() -> None:
    loaded = modules_after(
        "import delegate.runtime.bus\n"
        "from delegate.runtime import without_unused_extras\n"
        "with without_unused_extras():\n"
        "    import openai\n"
        "assert openai.AsyncOpenAI\n"
    )
    assert {k: loaded[k] for k in ("nats", "openai", "aiohttp")} == {"nats": True, "openai": True, "aiohttp": False}
    loaded = modules_after(
        "import delegate.runtime.bus\nfrom twilio.http.async_http_client import AsyncTwilioHttpClient"
    )
    assert loaded["aiohttp"], loaded


def test_the_launcher_supervises_without_the_role_table() -> None:
    """The launcher runs as long as the system does: the role table (pydantic and every contract,
    ~18 MB) is read by the short-lived child that prepares the NATS identities, not by it."""
    probe = (
        "import sys, delegate.launcher.__main__, delegate.launcher.run\n"
        "print(sorted(m for m in ('pydantic', 'delegate.contracts', 'nats') if m in sys.modules))"
    )
    printed = probe_output(probe)
    assert printed == "[]"


def test_the_contracts_build_a_validator_when_it_is_first_used() -> None:
    """Every process imports every contract; building each model's validator at import was
    ~0.08 s of every start's CPU, for the few a start uses."""
    probe = (
        "from delegate.contracts.events import PAYLOADS\n"
        "from delegate.contracts.messages import Ping, Pong\n"
        "built = sorted(kind for kind, model in PAYLOADS.items() if model.__pydantic_complete__)\n"
        "assert not Pong.__pydantic_complete__\n"
        "assert Pong.model_validate_json(Pong(service='x').model_dump_json()).service == 'x'\n"
        "assert Pong.__pydantic_complete__ and not Ping.__pydantic_complete__\n"
        "print(built)"
    )
    printed = probe_output(probe)
    assert printed == "[]"


def test_no_contract_model_or_adapter_is_built_at_import() -> None:
    """The signals, the WebSocket frames, the envelope, push subscriptions and every union's
    adapter too, in every contract a service imports to start: built at import they were about
    0.1 s of every process's start (half of importing the contracts). Only a model made as
    another's default value (``BudgetLine()``) is built then."""
    probe = (
        "import json, pydantic\n"
        "import delegate.contracts.roles, delegate.contracts.push, delegate.contracts.cursor\n"
        "def every(cls):\n"
        "    for sub in cls.__subclasses__():\n"
        "        yield sub\n"
        "        yield from every(sub)\n"
        "from delegate.contracts import channels, messages, signals, voice, ws\n"
        "adapters = [channels.OUTBOUND_ADAPTER, messages.AGENT_INPUT_ADAPTER, signals.SIGNAL_ADAPTER,\n"
        "            voice.voice_in_adapter, voice.voice_out_adapter, ws.CLIENT_MESSAGE, ws.SERVER_MESSAGE]\n"
        "print(json.dumps([sorted({m.__qualname__ for m in every(pydantic.BaseModel)\n"
        "                          if m.__module__.startswith('delegate.') and m.__pydantic_complete__}),\n"
        "                  [a.pydantic_complete for a in adapters]]))"
    )
    printed = probe_output(probe)
    built, adapters = json.loads(printed.splitlines()[-1])
    assert built == ["BudgetLine"] and not any(adapters), (built, adapters)


def test_the_ledger_leaves_the_validators_to_its_writer_process() -> None:
    """The ledger's bus process never validates an event (its writer process does): it does not
    build the per-kind validators (~0.08 s of CPU on every start)."""
    probe = (
        "import sys, importlib\n"
        "importlib.import_module('delegate.ledger.main')\n"
        "print('delegate.ledger.rows' in sys.modules)"
    )
    printed = probe_output(probe)
    assert printed == "False"


def test_the_ledger_writer_process_loads_no_nats_client() -> None:
    """It talks to the ledger over a pipe: nats-py (and the bus package) would only cost it memory."""
    loaded = modules_after("import importlib; importlib.import_module('delegate.ledger.writer')")
    assert not loaded["nats"], loaded


def test_the_ledger_writer_process_loads_no_settings_machinery() -> None:
    """It reads five values the ledger put in its environment (``WriterSettings``) and validates
    events with the contracts' models alone: pydantic-settings, the NATS identity, the role table
    and the topics (every contract) were a third of its start's CPU, 0.38 -> 0.26 s."""
    probe = (
        "import sys, importlib\n"
        "importlib.import_module('delegate.ledger.writer'), importlib.import_module('delegate.ledger.rows')\n"
        "heavy = ('pydantic_settings', 'delegate.runtime.settings', 'delegate.runtime.credentials',\n"
        "         'delegate.contracts.roles', 'delegate.contracts.topics', 'delegate.ledger.settings')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    printed = probe_output(probe)
    assert printed == "[]"
