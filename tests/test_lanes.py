"""The lanes: `make test-fast` starts no process (a test that does fails, naming its missing
mark), `make test` needs no torch, and the embedding ranker has a lane and an install of its own."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = '''
import subprocess, sys
import pytest

def test_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.integration
def test_marked_and_starts_a_process():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_in_process():
    assert sum(range(4)) == 6

def test_uses_nats(nats_server):
    pass
'''

CONFTEST = '''
import pytest
pytest_plugins = ["tests.support.lanes"]

@pytest.fixture
def nats_server():
    raise AssertionError("never set up in the fast lane")
'''


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_probe.py").write_text(PROBE)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n  integration: processes\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider", "-rf", *args],
        cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""}, capture_output=True, text=True, timeout=120,
    )


@pytest.mark.integration
def test_the_fast_lane_fails_an_unmarked_test_that_starts_a_process(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-m", "not integration", "--no-processes")
    assert "1 failed, 1 passed, 2 deselected" in done.stdout, done.stdout
    assert "FAILED test_probe.py::test_starts_a_process - RuntimeError: subprocess.Popen" in done.stdout
    assert re.search(r"RuntimeError: subprocess.Popen.*belongs to the `integration` lane", done.stdout), done.stdout
    # Without the flag the same tests run as they are: the guard is the lane's alone.
    done = _pytest(tmp_path, "-m", "not integration")
    assert "2 passed, 2 deselected" in done.stdout, done.stdout


def test_make_test_needs_no_torch_and_the_embeddings_lane_has_its_own_install() -> None:
    makefile = (ROOT / "Makefile").read_text()

    def recipe(target: str) -> str:
        return makefile.split(f"\n{target}:", 1)[1].split("\n\n", 1)[0]

    assert "[embeddings]" not in recipe("$(BIN)/.installed")
    assert "[embeddings]" in recipe("$(BIN)/.installed-embeddings")
    assert '-m "not embeddings"' in recipe("test") and "--durations=25" in recipe("test")
    assert "install-embeddings" in recipe("test-embeddings") and "-m embeddings" in recipe("test-embeddings")
    assert "--no-processes" in recipe("test-fast")
    ci = (ROOT / ".ci" / "run").read_text()
    # README's test command runs last, so its pytest summary closes the run.
    assert ci.index("make test-embeddings\n") < ci.index("make test\n")
    assert "5432" not in ci and "pg_ctl" not in ci


def test_the_split_lane_runs_the_suite_with_a_process_per_service(tmp_path: Path) -> None:
    """`make test` hosts a test's services in one process; `make test-split` is the same run with
    one process each, and a test that acts on one service alone must have said so."""
    from tests.support.system import SPLIT_VARIABLE, System

    makefile = (ROOT / "Makefile").read_text()
    split = makefile.split("\ntest-split:", 1)[1].split("\n\n", 1)[0]
    whole = makefile.split("\ntest:", 1)[1].split("\n\n", 1)[0]
    assert f"{SPLIT_VARIABLE}=split $(PYTEST)" in split
    assert split.split("$(PYTEST)", 1)[1] == whole.split("$(PYTEST)", 1)[1]

    system = System(tmp_path)
    system.hosted["agent"] = "host"  # as start_host records it
    with pytest.raises(KeyError, match=r"'agent' runs in the System's host process 'host'.*separate=\('agent',\)"):
        system.kill("agent")
    with pytest.raises(KeyError, match="'voice'"):
        system.procs["voice"]
