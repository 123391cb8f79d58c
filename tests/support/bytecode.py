"""Every Python process a test starts reuses compiled bytecode, even where the environment says
not to write it.

PYTHONDONTWRITEBYTECODE (set to keep ``__pycache__`` out of a work tree) makes every service
process, ledger writer and tool a test starts compile Delegate's sources again: the packages are
installed editable, so no bytecode of them exists. That was ~0.1 s of CPU of every System's start
(a host of the ledger, agent and gateway: 0.80 -> 0.70 s with its writer and NATS), a few hundred
a run. The session lifts it for the processes it starts and has them write the bytecode under
test-output/pycache instead (PYTHONPYCACHEPREFIX), so the work tree still gets none. Python checks
a cached file against its source's modification time and size, so an edit is compiled anew.
"""

import os
from collections.abc import MutableMapping
from pathlib import Path

PREFIX = Path(__file__).resolve().parents[2] / "test-output" / "pycache"


def cache_bytecode(environ: MutableMapping[str, str], prefix: Path = PREFIX) -> None:
    """Let the processes started with ``environ`` write bytecode, under ``prefix``, if it forbade it."""
    if not environ.pop("PYTHONDONTWRITEBYTECODE", ""):
        return
    environ.setdefault("PYTHONPYCACHEPREFIX", str(prefix))


def pytest_configure() -> None:
    # Before xdist starts its workers, which inherit this environment (the processes they start too).
    cache_bytecode(os.environ)
