"""The processes a test session starts reuse their compiled bytecode, which a distributed run
compiles once before its workers start (tests/support/bytecode.py)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bytecode import PREFIX, cache_bytecode, modules_to_collect, warm_up


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


def test_the_modules_a_run_collects_are_its_paths_test_files(tmp_path: Path) -> None:
    (tmp_path / "a" / "__pycache__").mkdir(parents=True)
    for name in ("a/test_one.py", "a/helper.py", "a/__pycache__/test_old.py", "test_two.py"):
        (tmp_path / name).write_text("")
    assert modules_to_collect(["a", "test_two.py::test_x", "missing"], tmp_path) == [
        tmp_path / "a" / "test_one.py", tmp_path / "test_two.py"]


@pytest.mark.integration  # starts two pytest processes
def test_a_warm_up_fills_the_cache_with_every_test_module_rewritten_once(tmp_path: Path) -> None:
    files = []
    for name in ("test_one.py", "test_two.py"):
        (tmp_path / name).write_text("def test_it():\n    assert 1 + 1 == 2\n")
        files.append(tmp_path / name)
    cache = tmp_path / "cache"
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environ["PYTHONPYCACHEPREFIX"] = str(cache)
    assert warm_up(files, tmp_path, environ, mark=cache / "warm")

    def rewritten() -> list[str]:  # pytest's own pyc of a module whose asserts it rewrote
        return sorted(p.name.split(".")[0] for p in cache.rglob("test_*-pytest-*.pyc"))

    assert rewritten() == ["test_one", "test_two"]
    for pyc in cache.rglob("test_*-pytest-*.pyc"):
        pyc.unlink()
    assert warm_up(files, tmp_path, environ, mark=cache / "warm")
    assert rewritten() == [], "warmed once: the mark says so, nothing is collected again"

    (tmp_path / "test_broken.py").write_text("import no_such_module_anywhere\n")
    assert not warm_up([*files, tmp_path / "test_broken.py"], tmp_path, environ, mark=cache / "warm")


@pytest.mark.integration  # starts a pytest process
def test_a_warm_up_that_hangs_is_given_up_and_the_run_goes_on(tmp_path: Path) -> None:
    # A module whose import never returns (a wait on an event nothing sets): the warm-up's hang.
    (tmp_path / "test_slow.py").write_text("import threading\nthreading.Event().wait()\n")
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environ["PYTHONPYCACHEPREFIX"] = str(tmp_path / "cache")
    assert not warm_up([tmp_path / "test_slow.py"], tmp_path, environ, mark=tmp_path / "cache" / "warm", timeout=3)
    assert not (tmp_path / "cache" / "warm").exists()
