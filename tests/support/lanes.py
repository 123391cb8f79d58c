"""The test lanes: ``make test-fast`` runs what starts no process and no browser.

A test that starts a process (a nats-server, a service, PostgreSQL, Chromium, a CLI) is marked
``integration`` (or ``browser``). The fixtures that start the shared processes mark their users
themselves, and ``--no-processes`` (what ``make test-fast`` passes) makes any other process start
fail the test that tried, naming the mark it lacks: the fast lane cannot quietly grow slow.
"""

import sys
from typing import Any

import pytest

# Who needs one of these fixtures (directly or through another) talks to real processes.
PROCESS_FIXTURES = frozenset({"nats_server", "system", "shared_standin", "postgres",
                              "standin_process", "shared_systems"})

# The audit events of every way Python starts another program.
PROCESS_EVENTS = frozenset({"subprocess.Popen", "os.posix_spawn", "os.spawn", "os.exec", "os.fork",
                            "os.forkpty", "os.system", "pty.spawn"})

_forbidden = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _forbidden and event in PROCESS_EVENTS:
        raise RuntimeError(f"{event}{args[:2]!r}: this test starts a process, so it belongs to the "
                           "`integration` lane (pytest.mark.integration), not to `make test-fast`")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--no-processes", action="store_true",
                     help="fail any test that starts a process (make test-fast: proves the lane's marks)")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--no-processes"):
        sys.addaudithook(_audit)  # for good: an audit hook cannot be removed, hence the flag


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if PROCESS_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.integration)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Any:
    global _forbidden
    _forbidden = item.config.getoption("--no-processes")
    try:
        yield
    finally:
        _forbidden = False
