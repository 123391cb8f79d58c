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
    for member in [*SERVICES, *LIBRARIES]:
        assert not (ROOT / "services" / member / "src" / "delegate" / "__init__.py").exists(), member


def test_services_import_no_other_service() -> None:
    packages = set(SERVICES.values())
    for folder, package in SERVICES.items():
        for path in (ROOT / "services" / folder / "src").rglob("*.py"):
            text = path.read_text()
            for other in packages - {package}:
                assert not re.search(rf"^\s*(from|import) delegate\.{other}\b", text, re.M), (path, other)


def test_every_member_requires_python_311() -> None:
    for member in [*SERVICES, *LIBRARIES]:
        meta = tomllib.loads((ROOT / "services" / member / "pyproject.toml").read_text())
        assert meta["project"]["requires-python"] == ">=3.11", member
