"""The one settings source: environment first, then `.env`, empty means unset, for the launcher
and for every service alike; and who answers (OpenAI or the offline stand-in) decided once."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from delegate.runtime.settings_source import (
    OFFLINE_KEY,
    export_openai_environment,
    merged_environment,
    openai_endpoint,
)

# Each probe runs in a process of its own, in a folder of its own: pydantic-settings reads
# `.env` from the working directory, and building settings may hand the OpenAI SDK its
# variables through the process environment.
_PROBE = r"""
import json, os, sys
from delegate.launcher.run import launch_environment
from delegate.gateway.settings import Settings as Gateway
from delegate.agent.settings import Settings as Agent
from delegate.ledger.settings import Settings as Ledger
launcher = launch_environment()
gateway, agent, ledger = Gateway(), Agent(), Ledger()
json.dump({
    "launcher": {k: launcher.get(k) for k in sys.argv[1:]},
    "gateway_port": gateway.delegate_port,
    "log_level": [gateway.log_level, agent.log_level],
    "compact": [gateway.compact_threshold, agent.compact_threshold],
    "database_url": ledger.database_url,
    "offline": agent.delegate_offline_model,
    "sdk_key": os.environ.get("OPENAI_API_KEY"),
    "sdk_base": os.environ.get("OPENAI_BASE_URL"),
}, sys.stdout)
"""


def _probe(cwd: Path, env: dict[str, str], *keys: str) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DELEGATE_", "LOG_LEVEL",
                                                                     "COMPACT_", "DATABASE_URL"))}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *keys], cwd=cwd, env={**base, **env},
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout)
    return found


@pytest.mark.integration
def test_the_issue_reproduction_an_empty_bool_is_unset(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", "from delegate.agent.settings import Settings; Settings()"],
        cwd=tmp_path, env={**os.environ, "DELEGATE_OFFLINE_MODEL": ""}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.integration
def test_environment_first_then_dotenv_empty_is_unset_launcher_and_services_agree(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text(
        "DELEGATE_PORT=9101\n"
        "LOG_LEVEL=DEBUG\n"
        "COMPACT_THRESHOLD=1234\n"
        "DATABASE_URL=\n"  # empty in .env: unset, SQLite
        "DELEGATE_OFFLINE_MODEL=\n"
    )
    env = {
        "DELEGATE_PORT": "9102",  # the environment wins over .env
        "LOG_LEVEL": "",  # empty in the environment: unset, so .env's value applies
    }
    seen = _probe(tmp_path, env, "DELEGATE_PORT", "LOG_LEVEL", "COMPACT_THRESHOLD", "DATABASE_URL")
    assert seen["launcher"] == {
        "DELEGATE_PORT": "9102", "LOG_LEVEL": "DEBUG", "COMPACT_THRESHOLD": "1234", "DATABASE_URL": None,
    }
    assert seen["gateway_port"] == 9102
    assert seen["log_level"] == ["DEBUG", "DEBUG"]
    assert seen["compact"] == [1234, 1234]
    assert seen["database_url"] is None


@pytest.mark.integration
def test_without_dotenv_the_defaults_apply_in_both(tmp_path: Path) -> None:
    seen = _probe(tmp_path, {}, "DELEGATE_PORT")
    assert seen["launcher"] == {"DELEGATE_PORT": None}
    assert seen["gateway_port"] == 8081


@pytest.mark.integration
def test_a_key_in_dotenv_reaches_the_sdk_and_never_the_standin(tmp_path: Path) -> None:
    (tmp_path / ".env").write_text("OPENAI_API_KEY=sk-from-dotenv\n")
    seen = _probe(tmp_path, {"OPENAI_STANDIN_URL": "http://standin:8765/v1", "OPENAI_BASE_URL": ""})
    assert seen["offline"] is False
    assert seen["sdk_key"] == "sk-from-dotenv"
    assert seen["sdk_base"] is None  # OpenAI itself, not the stand-in (and not the empty string)


@pytest.mark.integration
def test_without_a_key_the_standin_answers_and_the_agent_says_so(tmp_path: Path) -> None:
    seen = _probe(tmp_path, {"OPENAI_API_KEY": "", "OPENAI_STANDIN_URL": "http://standin:8765/v1"})
    assert seen["offline"] is True
    assert seen["sdk_key"] == OFFLINE_KEY
    assert seen["sdk_base"] == "http://standin:8765/v1"


@pytest.mark.parametrize(
    ("key", "base", "standin", "expected"),
    [
        (None, None, None, (OFFLINE_KEY, None, True)),
        ("", None, "http://s/v1", (OFFLINE_KEY, "http://s/v1", True)),
        (OFFLINE_KEY, "http://s2/v1", None, (OFFLINE_KEY, "http://s2/v1", True)),
        ("sk-real", None, "http://s/v1", ("sk-real", None, False)),
        ("sk-real", "http://proxy/v1", "http://s/v1", ("sk-real", "http://proxy/v1", False)),
        (" sk-real ", " ", None, ("sk-real", None, False)),
    ],
)
def test_who_answers_is_decided_by_whether_a_real_key_is_set(
    key: str | None, base: str | None, standin: str | None, expected: tuple[str, str | None, bool]
) -> None:
    got = openai_endpoint(key, base, standin)
    assert (got.api_key, got.base_url, got.offline) == expected


def test_export_drops_an_empty_base_url_and_leaves_nothing_to_point_at_alone() -> None:
    environ = {"OPENAI_BASE_URL": ""}
    export_openai_environment(openai_endpoint(None), environ)
    assert environ == {}
    environ = {"OPENAI_BASE_URL": "http://s/v1"}
    export_openai_environment(openai_endpoint("sk-real"), environ)
    assert environ == {"OPENAI_API_KEY": "sk-real"}


def test_merged_environment_rules(tmp_path: Path) -> None:
    dotenv = tmp_path / ".env"
    dotenv.write_text("A=from-file\nB=from-file\nC=\n# D=commented\nE='quoted value'\n")
    merged = merged_environment({"A": "from-env", "B": "", "F": "only-env"}, dotenv)
    assert merged == {"A": "from-env", "B": "from-file", "E": "quoted value", "F": "only-env"}
    assert merged_environment({"A": "x"}, tmp_path / "missing") == {"A": "x"}
