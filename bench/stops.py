"""How long ``make run`` takes to stop, and that nothing it started outlives it (issue #27).

    python -m bench.stops                           # 50 rounds of each way to stop, host mode
    python -m bench.stops --rounds 10 --ways together --mode split

Each round starts ``python -m delegate.launcher`` in a temporary directory (in a session of its
own, like a shell's foreground job), waits until every service answers ready, then stops it
one way and times it until the launcher and every process below it are gone:

- ``together``: ``kill -TERM -<pgid>`` as a shell does to ``make run``: the launcher takes two
  SIGTERMs at once (make forwards its own), and a SIGINT after them;
- ``double-int``: Ctrl-C, and a second Ctrl-C once the stop is under way;
- ``sigkill``: SIGKILL of the launcher alone: its children must die with it.

Prints each way's distribution against the 5 s bound; asserts nothing. The rounds start the
same stack on the same data again and again (a warm start), so they also print the warm start.
"""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.footprint import INHERITED, launch, tree, wait_ready
from bench.stats import pct
from delegate.launcher.procs import free_port

BOUND_S = 5.0
WAYS = ("together", "double-int", "sigkill")
GONE_WITHIN_S = 60.0  # a round that has not stopped by then is reported as hung


def running(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def stop_once(launcher: subprocess.Popen[bytes], way: str, log: Path) -> float:
    """Stop the stack ``way``; seconds until the launcher and all it started are gone."""
    below = [p.pid for p in tree(launcher.pid) if p.pid != launcher.pid]
    began = time.monotonic()
    if way == "together":
        os.killpg(launcher.pid, signal.SIGTERM)
        os.killpg(launcher.pid, signal.SIGTERM)
        os.killpg(launcher.pid, signal.SIGINT)
    elif way == "double-int":
        os.killpg(launcher.pid, signal.SIGINT)
        deadline = time.monotonic() + GONE_WITHIN_S
        while time.monotonic() < deadline and "stopping" not in log.read_text():
            time.sleep(0.01)
        os.killpg(launcher.pid, signal.SIGINT)
    else:
        os.kill(launcher.pid, signal.SIGKILL)
    deadline = began + GONE_WITHIN_S
    while time.monotonic() < deadline:
        if launcher.poll() is not None and not any(running(pid) for pid in below):
            return time.monotonic() - began
        time.sleep(0.01)
    for pid in below:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
    return float("inf")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--ways", default=",".join(WAYS), help=f"comma list of: {', '.join(WAYS)}")
    parser.add_argument("--mode", default="host", choices=("host", "split"), help="DELEGATE_PROCESSES")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds a start may take")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w in WAYS]
    workdir = Path(tempfile.mkdtemp(prefix="delegate-stops-"))
    runtime = workdir / "runtime-data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    # A key (never sent: nothing calls the model) so the launcher starts no stand-in of its own.
    env.update(RUNTIME_DATA_DIR=str(runtime), DELEGATE_PORT=str(port), DELEGATE_PROCESSES=args.mode,
               OPENAI_API_KEY="sk-stops-bench-never-sent")
    times: dict[str, list[float]] = {w: [] for w in ways}
    starts: list[float] = []
    try:
        for round_ in range(args.rounds):
            for way in ways:
                (workdir / "launcher.log").write_text("")
                since, began = time.time(), time.monotonic()
                launcher = launch(workdir, env)
                try:
                    wait_ready(launcher, runtime, port, args.timeout, verbose=False, since=since)
                    starts.append(time.monotonic() - began)
                    times[way].append(stop_once(launcher, way, workdir / "launcher.log"))
                finally:
                    if launcher.poll() is None:
                        os.killpg(launcher.pid, signal.SIGKILL)
                        launcher.wait()
            print(f"round {round_ + 1}: " + ", ".join(f"{w} {times[w][-1]:.2f} s" for w in ways), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nDELEGATE_PROCESSES={args.mode}, {args.rounds} rounds, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    print(f"{'way':<12} {'n':>4} {'min':>7} {'p50':>7} {'p90':>7} {'max':>7}  within {BOUND_S:.0f} s")
    for way, samples in times.items():
        within = sum(t <= BOUND_S for t in samples)
        print(f"{way:<12} {len(samples):>4} {min(samples):7.2f} {pct(samples, 50):7.2f} {pct(samples, 90):7.2f} "
              f"{max(samples):7.2f}  {within}/{len(samples)}")
    if starts:
        print(f"warm start to every service ready: p50 {pct(starts[1:] or starts, 50):.2f} s, "
              f"max {max(starts[1:] or starts):.2f} s (the first start excluded)")


if __name__ == "__main__":
    main()
