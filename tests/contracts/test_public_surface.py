"""The public surface of the two libraries, ``contracts`` and ``runtime`` (as httpx tests its own).

Each package's ``__all__`` says what a service may import; the snapshot below fails the test
when that changes, so a change to the surface is a decision made on purpose (update SURFACE in
the same commit). Every module is either on the surface or named internal here, and no service
imports past the surface.
"""

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

SERVICES = Path(__file__).resolve().parents[2] / "services"

SURFACE: dict[str, list[str]] = {
    "delegate.contracts": [
        "budget", "calendar", "channels", "cursor", "events", "ids", "ledger_events", "limits", "memory",
        "messages", "people", "push", "reminders", "roles", "signals", "streams", "subjects", "tasks", "topics",
        "usage", "voice", "ws",
    ],
    "delegate.runtime": [
        "UNUSED_EXTRAS", "bus", "calendar_now", "exits", "hard_stop", "known_sender", "lease", "ledger_client",
        "ledger_follower", "logs",
        "memory_context", "metering", "openai_bounds", "openai_client", "pricing", "retry", "service", "settings",
        "settings_check", "settings_source", "spend", "twilio_rest", "validation", "webpush", "without_unused_extras",
        "working_context",
    ],
    "delegate.runtime.bus": [
        "ATOMIC_BATCHES", "DEAD_LETTER_DATA_LIMIT", "MAX_BATCH", "MESSAGE_SCHEDULES", "MSG_ID", "PUBLISH_RETRY",
        "TRANSIENT", "BatchRefused", "Bus", "BusUnavailable", "DomainError", "RemoteError", "Retryable",
        "ServerFeature", "ServerUnsuitable", "describe", "in_progress", "nak", "quietly", "start_when_server_suits",
        "update_stream",
    ],
}
# Modules that are not on the surface: only their own package uses them.
INTERNAL: dict[str, set[str]] = {
    "delegate.contracts": {"text"},
    "delegate.runtime": {"credentials"},
    "delegate.runtime.bus": {
        "acks", "atomic", "batches", "closing", "connection", "consumer", "dead_letters", "errors", "server"
    },
}
LIBRARIES = {"contracts", "runtime"}


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_the_surface_is_the_snapshot(package: str) -> None:
    exported = importlib.import_module(package).__all__
    assert sorted(exported) == sorted(SURFACE[package]), (
        f"{package}.__all__ changed: if that is meant, update SURFACE in this test in the same commit"
    )
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_every_exported_name_exists(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        if not hasattr(module, name):
            importlib.import_module(f"{package}.{name}")  # a submodule on the surface


@pytest.mark.parametrize("package", sorted(SURFACE))
def test_every_module_is_on_the_surface_or_internal(package: str) -> None:
    module = importlib.import_module(package)
    modules = {info.name for info in pkgutil.iter_modules(module.__path__)}
    undecided = modules - set(module.__all__) - INTERNAL[package]
    assert not undecided, f"new modules in {package}: add each to __all__ or to INTERNAL here"
    assert not (INTERNAL[package] - modules), "INTERNAL names a module that is gone"


def _past_the_surface(path: Path) -> list[str]:
    """The imports in ``path`` that reach a library's name or module not on its surface."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        targets: list[tuple[str, list[str]]] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets.append((node.module, [alias.name for alias in node.names]))
        elif isinstance(node, ast.Import):
            targets += [(alias.name, []) for alias in node.names]
        for module, names in targets:
            parts = module.split(".")
            if parts[0] != "delegate" or len(parts) < 2 or parts[1] not in LIBRARIES:
                continue
            # The deepest package on the surface that the import goes through decides.
            for depth in range(len(parts), 1, -1):
                package = ".".join(parts[:depth])
                if package in SURFACE:
                    rest = parts[depth:]
                    if rest and rest[0] not in SURFACE[package]:
                        found.append(f"{path.name}:{node.lineno} {module}")
                    elif not rest and any(n not in SURFACE[package] for n in names):
                        found.append(f"{path.name}:{node.lineno} {module} import {', '.join(names)}")
                    elif rest and f"{package}.{rest[0]}" in SURFACE and len(rest) > 1:
                        found.append(f"{path.name}:{node.lineno} {module}")  # past a sub-package's own surface
                    break
    return found


def test_no_service_imports_past_the_surface() -> None:
    offenders = []
    for member in sorted(SERVICES.iterdir()):
        if member.name in LIBRARIES or not (member / "src").is_dir():
            continue
        for path in sorted((member / "src").rglob("*.py")):
            offenders += _past_the_surface(path)
    assert offenders == []


def test_the_check_sees_an_import_past_the_surface(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from delegate.runtime.bus.errors import quietly\n"
        "from delegate.runtime.bus import Bus, _private\n"
        "from delegate.contracts.text import refuse_blank\n"
        "import delegate.runtime.credentials\n"
        "from delegate.contracts import topics\n"
        "from delegate.runtime.bus import Bus\n"
    )
    assert [line.split()[0] for line in _past_the_surface(sample)] == [
        "sample.py:1", "sample.py:2", "sample.py:3", "sample.py:4"
    ]
