"""Test processes forked from the preloaded fork server behave as ``python -m`` processes do
(tests/support/forked.py): what a test does to one, and what it reads of it, is the same."""

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.forked import ForkedChild, ForkedProcess

pytestmark = pytest.mark.integration  # starts processes

PROBE = "tests.support.child_probe"


def environment(**extra: str) -> dict[str, str]:
    """This process's environment but HOME, as a System gives its services theirs (from ours)."""
    return {**{k: v for k, v in os.environ.items() if k != "HOME"}, "PROBE": "given", "PYTHONUNBUFFERED": "1", **extra}


def started(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> ForkedProcess:
    env = env if env is not None else environment()
    return ForkedProcess("probe", PROBE, list(args), env, tmp_path / "logs" / "probe.log").start()


def seen(process: ForkedProcess) -> dict[str, Any]:
    first = process.log_text().splitlines()[0]
    report: dict[str, Any] = json.loads(first)
    return report


def test_a_child_is_forked_from_the_preloaded_server_and_runs_the_module_as_main(tmp_path: Path) -> None:
    process = started(tmp_path, "3")
    assert isinstance(process.proc, ForkedChild)
    assert process.proc.wait(60) == 3
    report = seen(process)
    assert report["name"] == "__main__" and report["argv"] == ["3"]
    assert report["preloaded"], "the child imported the services' code itself: the preload failed"
    assert report["parent"] != os.getpid()  # the fork server's child, not this process's
    assert report["pid"] == process.pid


def test_a_child_gets_its_own_session_environment_directory_and_log(tmp_path: Path) -> None:
    process = started(tmp_path)
    assert process.proc is not None and process.proc.wait(60) == 0
    report = seen(process)
    assert report["session_leader"]  # as start_new_session=True: a signal to our group misses it
    assert report["probe"] == "given" and report["home"] is None  # only the environment it was given
    assert report["cwd"] == os.getcwd()
    assert process.log_text().splitlines()[1:] == ["to stderr"]  # stdout and stderr, in order


def test_a_child_is_signalled_waited_for_and_polled_as_a_popen_is(tmp_path: Path) -> None:
    process = started(tmp_path, "wait")
    assert process.proc is not None
    with pytest.raises(subprocess.TimeoutExpired):
        process.proc.wait(0.2)
    assert process.alive() and process.proc.poll() is None and process.proc.returncode is None
    process.proc.send_signal(signal.SIGTERM)
    assert process.proc.wait(60) == -signal.SIGTERM
    assert not process.alive()
    process.proc.send_signal(signal.SIGKILL)  # to a child that has ended: nothing, as Popen does
    again = process.start()  # as System.restart starts the same process again
    assert again.proc is not None and again.proc.poll() is None
    again.kill()
    assert again.proc.returncode == -signal.SIGKILL


def test_an_environment_that_changes_the_interpreters_start_gets_a_fresh_interpreter(tmp_path: Path) -> None:
    process = started(tmp_path, env=environment(PYTHONFAULTHANDLER="1"))
    assert isinstance(process.proc, subprocess.Popen)
    assert process.proc.wait(60) == 0
    assert not seen(process)["preloaded"]
