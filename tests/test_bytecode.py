"""The processes a test session starts reuse their compiled bytecode (tests/support/bytecode.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bytecode import PREFIX, cache_bytecode


def test_a_ban_on_bytecode_becomes_a_cache_outside_the_tree(tmp_path: Path) -> None:
    environ = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    cache_bytecode(environ, tmp_path)
    assert environ == {"PYTHONPYCACHEPREFIX": str(tmp_path), "PATH": "/bin"}


def test_an_environment_that_allows_bytecode_is_left_alone(tmp_path: Path) -> None:
    environ = {"PATH": "/bin"}
    cache_bytecode(environ, tmp_path)
    assert environ == {"PATH": "/bin"}
    environ = {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": "elsewhere"}  # empty: not set
    cache_bytecode(environ, tmp_path)
    assert environ == {"PYTHONPYCACHEPREFIX": "elsewhere"}


@pytest.mark.integration  # starts an interpreter
def test_a_process_the_session_starts_writes_its_bytecode() -> None:
    probe = "import sys; print(sys.flags.dont_write_bytecode, sys.pycache_prefix)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=os.environ)
    assert done.returncode == 0, done.stderr
    flag, prefix = done.stdout.split()
    assert flag == "0"
    assert prefix in ("None", str(PREFIX))
