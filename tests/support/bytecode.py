"""Every Python process a test starts reuses compiled bytecode, even where the environment says
not to write it; and a distributed run compiles what its workers import once, before they start.

PYTHONDONTWRITEBYTECODE (set to keep ``__pycache__`` out of a work tree) makes every service
process, ledger writer and tool a test starts compile Delegate's sources again: the packages are
installed editable, so no bytecode of them exists. That was ~0.1 s of CPU of every System's start
(a host of the ledger, agent and gateway: 0.80 -> 0.70 s with its writer and NATS), a few hundred
a run. The session lifts it for the processes it starts and has them write the bytecode under
test-output/pycache instead (PYTHONPYCACHEPREFIX), so the work tree still gets none. Python checks
a cached file against its source's modification time and size, so an edit is compiled anew.

A cache under a prefix starts empty: the standard library's and the installed packages' own
bytecode is not looked for there, and pytest rewrites every test module's asserts. In a fresh
clone (CI's every run) the workers of ``make test`` all did that at once, each ~11 s of CPU more
than with the cache filled (~50 s before the first test, against ~23 s). So before the workers
start, ``warm_up`` collects the tests once, in two processes (one per core), which fills it; a
mark says it was done, and later runs skip it (what changed since is compiled where it is used).
"""

import hashlib
import os
import subprocess
import sys
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest

PREFIX = Path(__file__).resolve().parents[2] / "test-output" / "pycache"
WARM_MARK = PREFIX / "warm"
WARM_PROCESSES = 2
WARM_TIMEOUT_S = 300


def cache_bytecode(environ: MutableMapping[str, str], prefix: Path = PREFIX) -> None:
    """Let the processes started with ``environ`` write bytecode, under ``prefix``, if it forbade it."""
    if not environ.pop("PYTHONDONTWRITEBYTECODE", ""):
        return
    environ.setdefault("PYTHONPYCACHEPREFIX", str(prefix))


def modules_to_collect(args: Sequence[str], root: Path) -> list[Path]:
    """The test modules a run of ``args`` (paths, or node ids) collects, sorted."""
    found: set[Path] = set()
    for arg in args:
        path = (root / arg.split("::", 1)[0]).resolve()
        if path.is_dir():
            found.update(p for p in path.rglob("test_*.py") if "__pycache__" not in p.parts)
        elif path.is_file():
            found.add(path)
    return sorted(found)


def stamp(files: Sequence[Path]) -> str:
    """What the cache was filled with, and by: another interpreter or pytest rewrites differently."""
    listed = hashlib.sha256("\n".join(map(str, files)).encode()).hexdigest()
    return f"{sys.version} pytest {pytest.__version__} files {listed}"


def warm_up(
    files: Sequence[Path], root: Path, environ: dict[str, str], mark: Path = WARM_MARK,
    timeout: float = WARM_TIMEOUT_S,
) -> bool:
    """Collect ``files`` in ``WARM_PROCESSES`` processes, so that the bytecode cache ``environ``
    names holds them and all they import; True (and ``mark`` written) when every one could."""
    if mark.exists() and mark.read_text() == stamp(files):
        return True
    shares = [list(files[i::WARM_PROCESSES]) for i in range(WARM_PROCESSES)]
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist"]
    procs = [
        subprocess.Popen([*command, *map(str, share)], cwd=root, env=environ,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for share in shares if share
    ]
    # A module that fails to import fails its collection here too: the workers report it. A
    # warm-up that hangs is given up: the run goes on, each worker compiling for itself.
    deadline = time.monotonic() + timeout
    done = []
    for proc in procs:
        try:
            done.append(proc.wait(timeout=max(deadline - time.monotonic(), 0.1)) == 0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            done.append(False)
    if not all(done):
        return False
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(stamp(files))
    return True


def pytest_configure() -> None:
    # Before xdist starts its workers, which inherit this environment (the processes they start too).
    cache_bytecode(os.environ)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_setupnodes(config: pytest.Config, specs: Any) -> None:
    warm_up(modules_to_collect(config.args, config.invocation_params.dir), config.rootpath, dict(os.environ))
