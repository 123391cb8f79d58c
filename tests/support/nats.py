"""A private nats-server for tests: never the machine's shared one, so tests may kill it."""

import os
import shutil
from pathlib import Path

import pytest

from delegate.runtime.procs import NatsServer, nats_server_binary


def require_nats_binary() -> str:
    """The binary, or a skip locally; on CI (CI set) a missing binary fails the run."""
    try:
        return nats_server_binary()
    except FileNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("nats-server is missing on CI: `make install` must provide it")
        pytest.skip("nats-server not installed")
        raise


def start_nats(store: Path) -> NatsServer:
    require_nats_binary()
    if store.exists():
        shutil.rmtree(store)
    return NatsServer(store).start()
