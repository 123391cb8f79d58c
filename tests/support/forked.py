"""Service processes forked from one interpreter that has imported every service already.

A host started with ``python -m delegate.host`` spends most of its start's CPU importing: about
1.3 s for every service's code and the SDKs they use, on two cores that the suite's workers
share, for ~270 hosts and services a run. The tests start theirs from a fork server instead
(multiprocessing's, whose preload imports it all once per test worker): each child is forked
from it, gets its own session, log file, environment and arguments, then runs the module as
``python -m`` would (``runpy``), so its code, settings and signals are the real process's.

Only the start differs from ``make run``'s, and only where it cannot matter: the interpreter's
start-up flags are the fork server's, so an environment that changes one of them (a PYTHON*
variable other than PYTHONUNBUFFERED) gets a fresh interpreter, as does a platform without
``fork``. The launcher's own tests and the footprint benchmark still start fresh interpreters.
"""

import atexit
import io
import multiprocessing
import multiprocessing.util  # registers its exit function now, so ours (below) runs before it
import os
import runpy
import signal
import subprocess
import sys
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from delegate.launcher.procs import ManagedProcess

# Read once at start-up by the interpreter, so a child must share the fork server's to be forked.
_STARTUP_VARIABLES_IGNORED = frozenset({"PYTHONUNBUFFERED"})  # each child's streams are unbuffered anyway

# "0": every process from a fresh interpreter (to compare, or to rule the fork server out).
SWITCH = "DELEGATE_TEST_FORK"

_context: ForkServerContext | None = None
_startup: dict[str, str] = {}


def _fork_server() -> ForkServerContext | None:
    global _context
    if os.environ.get(SWITCH) == "0":
        return None
    if _context is None and "forkserver" in multiprocessing.get_all_start_methods():
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(["tests.support.preload"])
        _startup.update(_startup_variables(os.environ))
    return _context


def _startup_variables(env: dict[str, str] | os._Environ[str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith("PYTHON") and k not in _STARTUP_VARIABLES_IGNORED}


def _run_module(module: str, args: list[str], env: dict[str, str], log_path: str, cwd: str) -> None:
    """In the child: what ``subprocess.Popen([python, -m, module, *args], start_new_session=True,
    stdout=log, stderr=STDOUT, stdin=DEVNULL, env=env)`` would have set up, then the module."""
    os.setsid()
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    # Unbuffered as PYTHONUNBUFFERED makes them: a line written just before a SIGKILL is in the log.
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True, write_through=True)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), line_buffering=True, write_through=True, errors="backslashreplace"
    )
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    sys.argv = [module, *args]
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        # multiprocessing ends its children with os._exit: run what an interpreter's exit runs.
        atexit._run_exitfuncs()


class ForkedChild:
    """A forked process, used as a ``subprocess.Popen`` is (``delegate.launcher.procs.Child``)."""

    def __init__(self, process: BaseProcess) -> None:
        self._process = process

    @property
    def pid(self) -> int:
        assert self._process.pid is not None
        return self._process.pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode  # negative: the signal that ended it, as Popen says

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        code = self.returncode
        if code is None:
            raise subprocess.TimeoutExpired(self._process.name, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # as Popen: never a signal to a pid that may have been reused
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class ForkedProcess(ManagedProcess):
    """``python -m <module> <args>`` as ``ManagedProcess`` starts it, forked from the fork
    server when the environment allows (see the module's docstring)."""

    def __init__(self, name: str, module: str, args: list[str], env: dict[str, str], log_path: Path) -> None:
        super().__init__(name, [sys.executable, "-m", module, *args], env, log_path)
        self.module = module
        self.args = args

    def start(self) -> "ForkedProcess":
        context = _fork_server()
        if context is None or _startup_variables(self.env) != _startup:
            super().start()
            return self
        # The audit event of the process start it stands for: `make test-fast` refuses it (lanes).
        sys.audit("subprocess.Popen", sys.executable, self.argv, None, self.env)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        process = context.Process(
            target=_run_module, name=self.name,
            args=(self.module, self.args, dict(self.env), str(self.log_path), os.getcwd()),
        )
        process.start()
        self.proc = ForkedChild(process)
        return self


def server_cpu_seconds() -> float:
    """The CPU the fork server and the children it has reaped used so far (what the test
    worker's own RUSAGE_CHILDREN no longer sees: they are not its children)."""
    from multiprocessing import forkserver

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return 0.0
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    # After the command's closing parenthesis: utime, stime, cutime, cstime are fields 14-17.
    fields = stat[stat.rindex(")") + 2 :].split()
    return sum(int(f) for f in fields[11:15]) / os.sysconf("SC_CLK_TCK")


@atexit.register
def _kill_leftovers() -> None:
    """At the test worker's exit, before multiprocessing's own exit joins every child it started
    (for ever, for one stopped by SIGSTOP): a child still running is one a test left behind."""
    for process in multiprocessing.active_children():
        if process.pid is not None:
            try:
                os.kill(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
