"""The order test files run in, so that both workers of ``make test`` finish together.

``make test`` hands whole files to two workers (``--dist loadfile``): a worker that finishes
takes the next file in line. xdist's own order puts the files with the most tests first, so the
long restart and failover files, which have few tests each, start last, and the run ends when
the last of them does, one worker idle meanwhile. Here the files are ordered longest first (LPT
scheduling: the last file to start is a short one), by the seconds each took in a measured run
(``tests/file-seconds.json``), and xdist keeps that order (``--no-loadscope-reorder``). With
the per-file times measured so far the two orders end within seconds of each other: a guard
for the tail, not a large saving.

Every distributed run (``-n``) writes what its files took to ``test-output/file-seconds.json``, and
each worker the CPU its files cost to ``file-cpu-*.json`` beside it: copy the seconds over the
checked-in table after a full run on an idle machine. A file the table does not know yet is
estimated from its tests (a process-starting test costs seconds, any other almost nothing).
"""

import json
import os
import resource
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from .forked import server_cpu_seconds

# Both under the run's rootdir (the repository's root for `make test`).
TABLE = Path("tests", "file-seconds.json")
MEASURED = Path("test-output", "file-seconds.json")

# Estimates for a file missing from the table, per test (seconds).
PROCESS_TEST_S = 3.0
PLAIN_TEST_S = 0.02

_seconds: defaultdict[str, float] = defaultdict(float)
# CPU seconds per file, this process's and its reaped children's, and the fork server's and its
# (the services a test started and stopped, ``forked``): what a file costs the cores, whatever
# the load while it ran. A session-wide fixture's processes (PostgreSQL, say) count for the file
# whose test ended the session.
_cpu: defaultdict[str, float] = defaultdict(float)
_own_cpu: defaultdict[str, float] = defaultdict(float)  # the worker's own share of it
_systems: defaultdict[str, int] = defaultdict(int)  # Systems started per file


def own_cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


def cpu_seconds() -> float:
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own_cpu_seconds() + children.ru_utime + children.ru_stime + server_cpu_seconds()


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_table(path: Path) -> dict[str, float]:
    try:
        table = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {str(k): float(v) for k, v in table.items()}


def estimate(items: list[pytest.Item], table: dict[str, float]) -> dict[str, float]:
    """Seconds per file: measured where known, else estimated from its tests' marks."""
    guessed: defaultdict[str, float] = defaultdict(float)
    for item in items:
        slow = item.get_closest_marker("integration") or item.get_closest_marker("browser")
        guessed[file_of(item.nodeid)] += PROCESS_TEST_S if slow else PLAIN_TEST_S
    return {name: table.get(name, guess) for name, guess in guessed.items()}


def longest_first(items: list[pytest.Item], weights: dict[str, float]) -> list[pytest.Item]:
    """Files longest first (ties by name, so every worker collects the same order); the tests
    inside a file keep their own order."""
    return sorted(items, key=lambda item: (-weights[file_of(item.nodeid)], file_of(item.nodeid)))


def pytest_configure(config: pytest.Config) -> None:
    # xdist would otherwise reorder the files by their number of tests (see the module's text).
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)  # after the lanes plugin has marked the process-starting tests
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_first(items, estimate(items, load_table(config.rootpath / TABLE)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    from .system import System  # imported late: the plugin loads before the tests' path is set

    before, own_before, systems = cpu_seconds(), own_cpu_seconds(), System.created_count
    yield
    _cpu[file_of(item.nodeid)] += cpu_seconds() - before
    _own_cpu[file_of(item.nodeid)] += own_cpu_seconds() - own_before
    _systems[file_of(item.nodeid)] += System.created_count - systems


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # On the xdist controller too: it receives every worker's reports with their durations.
    _seconds[file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    # Only a distributed run (``make test``'s shape) writes figures: a targeted run of a file or
    # two, as one runs while working, would overwrite the whole run's table the moment after.
    if hasattr(session.config, "workerinput"):
        write_cpu(session)
        return  # a worker: the controller writes the whole run's seconds
    if not getattr(session.config.option, "numprocesses", None) or not _seconds:
        return
    out = session.config.rootpath / MEASURED
    out.parent.mkdir(parents=True, exist_ok=True)
    ordered = dict(sorted(((name, round(s, 1)) for name, s in _seconds.items()), key=lambda kv: -kv[1]))
    out.write_text(json.dumps(ordered, indent=1) + "\n")


def write_cpu(session: pytest.Session) -> None:
    """Each worker writes, per file: CPU seconds (its own and its reaped children's), Systems
    started, and the worker's own share of those seconds (tests' own work, in-process gateways,
    Chromium's driver) — the rest is the service processes'."""
    if not _cpu:
        return
    worker = session.config.workerinput["workerid"]  # type: ignore[attr-defined]
    out = session.config.rootpath / MEASURED.with_name(f"file-cpu-{worker}-{os.getpid()}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    ordered = {
        name: [round(s, 1), _systems[name], round(_own_cpu[name], 1)]
        for name, s in sorted(_cpu.items(), key=lambda kv: -kv[1])
    }
    out.write_text(json.dumps(ordered, indent=1) + "\n")
