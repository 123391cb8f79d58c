"""The launcher always stops, and nothing it started outlives it.

- Signals arriving together (``kill -TERM -<pgid>`` of ``make run``: make forwards its own, so
  the launcher takes two at once) once deadlocked its handler on a `threading.Event`'s lock, and
  the launcher with eight services stayed up until SIGKILLed.
- A double Ctrl-C stops it too, sooner rather than later.
- A SIGKILLed launcher runs no cleanup: its children die with it (`delegate.launcher.lifeline`).

The whole stop is built to fit in 5 s (the launcher's STOP_BUDGET_S, the services' STOP_GRACE_S,
then NATS_STOP_S; children are SIGKILLed with their launcher). The deadline polled here is that
bound with room for a loaded machine, and the measured times are printed; ``bench/stops.py``
runs the issue's 50 rounds of each and prints the distribution against the 5 s bound.
"""

import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from delegate.launcher.procs import free_port
from tests.support.waiting import eventually_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# The stop's own bound is 5 s (STOP_BUDGET_S 3.5 s + NATS_STOP_S 0.5 s); a hang is forever.
STOP_BOUND_S = 10.0
# Rounds of signals arriving together, alternately in one host and split (`make run`'s two
# modes); LAUNCHER_SIGNAL_ROUNDS=50 runs the full count (or bench/stops.py).
ROUNDS = int(os.environ.get("LAUNCHER_SIGNAL_ROUNDS", "4"))


def _descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid``, with its command line, read from /proc."""
    parents: dict[int, int] = {}
    commands: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            commands[int(entry.name)] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
    found: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in found:
                found[child] = commands.get(child, "")
                frontier.append(child)
    return found


def _running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


LAUNCHER = ("-m", "delegate.launcher")


def _launch(
    tmp_path: Path, log_path: Path, port: int = 0, mode: str = "split", program: tuple[str, ...] = LAUNCHER
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "TWILIO_", "IMAP_", "SMTP_"))}
    env.update(
        DELEGATE_PORT=str(port or free_port()),
        RUNTIME_DATA_DIR=str(tmp_path / "rt"),
        # With a key the launcher starts no stand-in: the services alone are what is stopped.
        # No request is ever sent with it.
        OPENAI_API_KEY="sk-launcher-test-never-sent",
        DELEGATE_PROCESSES=mode,  # split: the most children to stop
    )
    env.pop("DELEGATE_TOKEN", None)
    with open(log_path, "ab") as log:
        # A session of its own, like a shell's foreground job under make.
        return subprocess.Popen(
            [sys.executable, *program], env=env, cwd=tmp_path, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )


def _started(proc: subprocess.Popen[bytes], log_path: Path) -> dict[int, str]:
    """Once the launcher has started every child: what runs below it."""
    eventually_sync(lambda: "Delegate is starting" in log_path.read_text() or proc.poll() is not None,
                    "the launcher to start its services", 60)
    assert proc.poll() is None, log_path.read_text()
    children = _descendants(proc.pid)
    services = [cmd for cmd in children.values() if "delegate." in cmd and "delegate.ledger.writer" not in cmd]
    assert len(services) in (1, 8), children  # one host, or a process per service
    assert any("nats-server" in cmd for cmd in children.values()), children
    return children


def _ready(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _all_gone(children: dict[int, str]) -> bool:
    return not any(_running(pid) for pid in children)


def test_signals_arriving_together_always_stop_the_launcher(tmp_path: Path) -> None:
    times = []
    for round_ in range(ROUNDS):
        log_path = tmp_path / f"launch-{round_}.log"
        (tmp_path / f"r{round_}").mkdir()
        proc = _launch(tmp_path / f"r{round_}", log_path, mode=("host", "split")[round_ % 2])
        try:
            children = _started(proc, log_path)
            began = time.monotonic()
            # What `kill -TERM -<pgid>` of `make run` does: make forwards its SIGTERM to the
            # launcher, which has one of its own already; the second lands inside the first's
            # handling. SIGINT follows for good measure (a Ctrl-C in the same instant).
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGTERM)
            os.killpg(proc.pid, signal.SIGINT)
            assert proc.wait(STOP_BOUND_S) == 0, log_path.read_text()
            eventually_sync(functools.partial(_all_gone, children), "every child to stop", STOP_BOUND_S)
            times.append(time.monotonic() - began)
        finally:
            if proc.poll() is None:
                sys.stdout.write(log_path.read_text())
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    sys.stdout.write(f"{ROUNDS} rounds of signals together: stopped in at most {max(times):.2f} s\n")


# The launcher as `python -m delegate.launcher` runs it, plus one object whose finalizer sends it
# a SIGINT from the interpreter's teardown of its modules: by then the interpreter has put back
# the default action of every signal Python handled. That is where the test above lost a round
# now and then: its second and third signals, sent a moment after the first, landed after a stop
# that took milliseconds (7 rounds of 200 beside a full suite, exit code -2 or -15).
LATE_SIGNAL = """
import os, runpy, signal

class LateSignal:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)

late = LateSignal()
runpy.run_module("delegate.launcher", run_name="__main__", alter_sys=True)
"""


def test_a_signal_landing_as_the_launcher_exits_leaves_its_exit_code_alone(tmp_path: Path) -> None:
    log_path = tmp_path / "launch.log"
    proc = _launch(tmp_path, log_path, mode="host", program=("-c", LATE_SIGNAL))
    try:
        _started(proc, log_path)
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(STOP_BOUND_S) == 0, log_path.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_double_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    log_path = tmp_path / "launch.log"
    proc = _launch(tmp_path, log_path, mode="host")  # `make run`'s default
    try:
        children = _started(proc, log_path)
        began = time.monotonic()
        os.killpg(proc.pid, signal.SIGINT)
        # The second Ctrl-C once the stop is under way: it must cut the waiting short, not hang.
        eventually_sync(lambda: "stopping" in log_path.read_text(), "the stop to begin", STOP_BOUND_S)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(STOP_BOUND_S) == 0, log_path.read_text()
        eventually_sync(lambda: _all_gone(children), "every child to stop", STOP_BOUND_S)
        sys.stdout.write(f"double Ctrl-C: stopped in {time.monotonic() - began:.2f} s\n")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_sigkilled_launcher_leaves_nothing_running(tmp_path: Path) -> None:
    log_path = tmp_path / "launch.log"
    port = free_port()
    proc = _launch(tmp_path, log_path, port)
    children: dict[int, str] = {}
    try:
        _started(proc, log_path)
        # What must die is a running system, connected to its NATS, not one still importing.
        eventually_sync(lambda: _ready(port), "/readyz 200", 90)
        children = _descendants(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        killed = time.monotonic()
        eventually_sync(lambda: _all_gone(children), "the orphans to die with their launcher", STOP_BOUND_S)
        took = time.monotonic() - killed
        sys.stdout.write(f"SIGKILLed launcher: its {len(children)} processes gone in {took:.2f} s\n")
    finally:
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("mode", ["host", "split"])
def test_a_service_stops_within_its_grace_when_nats_is_gone(tmp_path: Path, mode: str) -> None:
    """Each service's stop is bounded by itself (STOP_GRACE_S), not only by a launcher's SIGKILL:
    with its NATS SIGKILLed, a SIGTERMed host (or every split service at once) still exits,
    though the agent's term end, the leases' release and the last publishes cannot go out."""
    log_path = tmp_path / "launch.log"
    port = free_port()
    proc = _launch(tmp_path, log_path, port, mode=mode)
    try:
        _started(proc, log_path)
        eventually_sync(lambda: _ready(port), "/readyz 200", 90)
        children = _descendants(proc.pid)
        nats_pid = next(pid for pid, cmd in children.items() if "nats-server" in cmd)
        services = [pid for pid, cmd in children.items() if "-m delegate." in cmd]
        os.kill(nats_pid, signal.SIGKILL)
        eventually_sync(lambda: not _running(nats_pid), "nats-server to die", STOP_BOUND_S)
        began = time.monotonic()
        for pid in services:
            # One may have ended already (a full run saw it once, cause not read): its exit is
            # what is waited for below either way.
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        waited = time.monotonic()
        eventually_sync(lambda: not any(_running(pid) for pid in services),
                        f"the {mode} services to stop without their NATS", STOP_BOUND_S)
        took = time.monotonic() - waited
        sys.stdout.write(f"{mode}: {len(services)} service processes stopped without NATS in {took:.2f} s "
                         f"(since the SIGTERM: {time.monotonic() - began:.2f} s)\n")
    finally:
        if proc.poll() is None:  # what it started dies with it (lifeline)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
