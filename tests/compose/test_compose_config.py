"""compose.yaml gives every service settings it accepts, and never a real key to the stand-in.

`docker compose config` renders the file the way Compose itself does; where the Compose plugin
is missing, the same environment is rendered here from the file (YAML anchors and merge keys,
`${VAR}`, `${VAR:-default}`, `${VAR:?message}`), so the check runs on every machine. Each
service's environment is then parsed by that service's real Settings class in a process of
its own.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from delegate.contracts.roles import ROLES

ROOT = Path(__file__).resolve().parents[2]
# One password per service identity of the role table (the test code's own identity aside).
PASSWORDS = {
    f"NATS_PASSWORD_{role.upper().replace('-', '_')}": f"pw-{role}" for role in ROLES if role != "test"
}
STANDIN_URL = "http://openai-standin:8765/v1"

_PROBE = r"""
import json, os, sys
from delegate.agent.settings import Settings
settings = Settings()
json.dump({"offline": settings.delegate_offline_model,
           "sdk_key": os.environ.get("OPENAI_API_KEY"), "sdk_base": os.environ.get("OPENAI_BASE_URL")}, sys.stdout)
"""

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def _interpolate(value: str, shell: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        given = shell.get(name, "")
        if op == ":?" and not given:
            raise AssertionError(f"compose would refuse to start: {name} {arg}")
        return given or (arg if op == ":-" else "")

    return _VAR.sub(one, value)


def _render_here(shell: dict[str, str]) -> dict[str, dict[str, str]]:
    """Each service's `environment`, as Compose renders it for the default profile."""
    services: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    rendered = {}
    for name, spec in services.items():
        assert not spec.get("profiles"), f"{name} is not in the default profile"
        env = spec.get("environment") or {}
        rendered[name] = {k: _interpolate(str(v), shell) for k, v in env.items()}
    return rendered


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker is None:
        return None
    ok = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60)
    return [docker, "compose"] if ok.returncode == 0 else None


def _render_with_compose(cli: list[str], shell: dict[str, str], workdir: Path) -> dict[str, dict[str, str]]:
    # A copy of the file in a folder of its own: the project's .env (if any) must not leak in.
    (workdir / "compose.yaml").write_text((ROOT / "compose.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "DELEGATE_"))}
    done = subprocess.run(
        [*cli, "-f", str(workdir / "compose.yaml"), "config", "--format", "json"],
        cwd=workdir, env={**env, **shell}, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    services = json.loads(done.stdout)["services"]
    return {name: {k: ("" if v is None else str(v)) for k, v in (spec.get("environment") or {}).items()}
            for name, spec in services.items()}


def _agent_settings(env: dict[str, str], cwd: Path) -> dict[str, Any]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DELEGATE_", "NATS_"))}
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], cwd=cwd, env={**base, **env}, capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _check(rendered: dict[str, dict[str, str]], cwd: Path, key: str | None) -> None:
    assert "openai-standin" in rendered, "the stand-in belongs to the default profile"
    agent = rendered["agent"]
    seen = _agent_settings(agent, cwd)
    if key is None:
        assert seen == {"offline": True, "sdk_key": "offline-standin", "sdk_base": STANDIN_URL}
    else:
        assert seen == {"offline": False, "sdk_key": key, "sdk_base": None}
    for service, env in rendered.items():  # the stand-in's address is offered, never a default base URL
        assert env.get("OPENAI_BASE_URL", "") in ("", None), service


@pytest.mark.parametrize("key", [None, "sk-real-key"])
def test_compose_file_as_rendered_here_gives_the_agent_valid_truthful_settings(
    tmp_path: Path, key: str | None
) -> None:
    shell = dict(PASSWORDS, **({"OPENAI_API_KEY": key} if key else {}))
    _check(_render_here(shell), tmp_path, key)


@pytest.mark.parametrize("key", [None, "sk-real-key"])
def test_docker_compose_config_gives_the_agent_valid_truthful_settings(tmp_path: Path, key: str | None) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("`docker compose version` fails here: the Docker Compose v2 plugin is not installed "
                    "(the file is still checked by the test above, rendered without Compose)")
    shell = dict(PASSWORDS, **({"OPENAI_API_KEY": key} if key else {}))
    _check(_render_with_compose(cli, shell, tmp_path), tmp_path, key)
