"""Idle memory and warm start of the whole stack, started exactly as ``make run`` starts it,
in both process modes side by side (DELEGATE_PROCESSES=split: a process per service; host:
every service in one ``python -m delegate.host``), offline (the stand-in answers) and with an
OpenAI key (no stand-in; the key is never sent anywhere: nothing calls the model at idle).

    python bench/footprint.py                          # both modes, offline and with a key
    python bench/footprint.py --modes host --endpoints key
    python bench/footprint.py --imports                # and, per service, what its start imports (split)
    python bench/footprint.py --env MALLOC_ARENA_MAX=2 # a setting for every child, to compare
    python bench/footprint.py --against OLD --warm-rounds 5  # warm starts, this tree vs a checkout

Each stack runs ``python -m delegate.launcher`` in a temporary directory (so no ``.env`` is
read), waits until every service answers its ping as ready and the whole process tree has
stopped using CPU, then reads each process's memory from /proc/<pid>/smaps_rollup. RSS counts
shared pages in every process that maps them; PSS divides them among the sharers (the PSS
total is what the stack really costs the machine); USS is what each process alone would free.
Then it stops the stack and starts it again on the same data (a warm start: the page cache
holds the code; ``--warm-rounds N`` times, the median reported) and times the launch until every
service answers ready, with the CPU seconds each process spent until then: on a machine shared
with other work the wall time follows the load, the CPU time does not.

``--against OLD`` (a checkout of an earlier commit, e.g. ``git worktree add OLD <commit>``)
times warm starts only, of this tree and of OLD's code (its ``services/*/src`` first on
PYTHONPATH), alternately on the same machine in the same run, and prints both medians.

Chromium is excluded: the tasks service launches it only when a task browses, and it must
not be running at idle (the bench says so if it is, and leaves it out of the total).
Linux only (/proc). Prints figures; asserts nothing.
"""

import argparse
import asyncio
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import nats

from delegate.contracts import topics
from delegate.contracts.roles import ROLES, inbox_prefix
from delegate.launcher.procs import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.stats import cpu_seconds

TARGET_MB = 400  # split mode (issue #17)
# One host process (issue #27): with an OpenAI key, and offline with the stand-in included.
HOST_TARGET_MB = {"key": 250, "offline": 300}
WARM_START_TARGET_S = 1.5
MODES = ("split", "host")
ENDPOINTS = ("offline", "key")
SERVICES = ("ledger", "agent", "inner-plane", "memory", "tasks", "voice", "pollers", "gateway")
# Settings the bench must not inherit from the shell: it measures a fresh, offline stack.
# PYTHONDONTWRITEBYTECODE too: with it (some shells and CI set it) every start compiles
# Delegate's own modules again (~0.15 s of CPU a host start), which no warm start of
# ``make run`` does (its first start writes the bytecode; an image's pip install compiles it).
INHERITED = ("OPENAI_", "TWILIO_", "IMAP_", "SMTP_", "NATS_", "DELEGATE_", "MEMORY_", "RUNTIME_DATA_DIR",
             "PYTHONDONTWRITEBYTECODE")
IDLE_WINDOW_S = 2.0
IDLE_CPU_S = 0.05  # the whole tree, per window: timers and heartbeats, nothing more


@dataclass
class Proc:
    pid: int
    ppid: int
    argv: list[str]

    @property
    def label(self) -> str:
        args = self.argv
        if "-m" in args and args.index("-m") + 1 < len(args):
            module = args[args.index("-m") + 1]
            return {"delegate.launcher": "launcher (make run)", "delegate.openai_standin": "openai-standin"}.get(
                module, module.removeprefix("delegate.").replace("_", "-")
            )
        name = Path(args[0]).name if args else "?"
        return name


def processes() -> dict[int, Proc]:
    found: dict[int, Proc] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().rstrip(b"\0").split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        found[int(entry.name)] = Proc(int(entry.name), ppid, [a.decode(errors="replace") for a in argv])
    return found


def tree(root: int) -> list[Proc]:
    """``root`` and all its descendants, parents first."""
    procs = processes()
    children: dict[int, list[Proc]] = defaultdict(list)
    for proc in procs.values():
        children[proc.ppid].append(proc)
    out, todo = [], [procs[root]] if root in procs else []
    while todo:
        proc = todo.pop(0)
        out.append(proc)
        todo[:0] = sorted(children[proc.pid], key=lambda p: p.pid)
    return out


def memory_kb(pid: int) -> dict[str, int]:
    """Rss, Pss and USS (private clean + dirty) in kB, from one read of smaps_rollup."""
    values: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        match = re.match(r"(\w+):\s+(\d+) kB", line)
        if match:
            values[match[1]] = int(match[2])
    return {
        "rss": values.get("Rss", 0),
        "pss": values.get("Pss", 0),
        "uss": values.get("Private_Clean", 0) + values.get("Private_Dirty", 0),
    }


def is_chromium(proc: Proc) -> bool:
    return bool(proc.argv) and re.search(r"chrom|headless_shell", Path(proc.argv[0]).name, re.I) is not None


# ---- readiness ------------------------------------------------------------------------------


def prober(service: str) -> str | None:
    """A role allowed to ping ``service`` (the bench logs in as that role, nothing more)."""
    query = topics.PINGS.get(service)
    if query is None:  # the gateway: its /healthz answers instead
        return None
    return next((role.name for role in ROLES.values() if query in role.requests), None)


async def quiet(_: Exception) -> None:
    """Connection errors while the stack starts are expected: the next poll retries."""


def listening(address: str) -> bool:
    """Whether the server takes connections yet. nats-py's connect to a port nothing listens on
    does not fail: it tries again after its reconnect wait (2 s), so a poll made in the moment
    before the server listened held the readiness poll for those 2 s."""
    host, _, port = address.removeprefix("nats://").rpartition(":")
    try:
        socket.create_connection((host, int(port)), timeout=0.2).close()
    except OSError:
        return False
    return True


async def ping_all(address: str, passwords: dict[str, str]) -> set[str]:
    """The services that answer their ping as ready."""
    ready: set[str] = set()
    if not listening(address):
        return ready
    for service in SERVICES:
        role = prober(service)
        if role is None:
            continue
        host = address.removeprefix("nats://")
        try:
            nc = await nats.connect(f"nats://{role}:{passwords[role]}@{host}", connect_timeout=1,
                                    allow_reconnect=False, max_reconnect_attempts=0,
                                    inbox_prefix=inbox_prefix(role), error_cb=quiet)
        except Exception:
            return ready
        try:
            reply = await nc.request(topics.PINGS[service].subject, b"{}", timeout=0.5)
            if json.loads(reply.data).get("ready") is True:
                ready.add(service)
        except Exception:
            pass
        finally:
            await nc.close()
    return ready


async def ping_within(address: str, passwords: dict[str, str], seconds: float = 5.0) -> set[str]:
    """``ping_all``, bounded: a connect to the previous start's server (its config not yet
    rewritten) can hang in nats-py; the next poll tries again."""
    try:
        return await asyncio.wait_for(ping_all(address, passwords), seconds)
    except TimeoutError:
        return set()


def gateway_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=0.5) as reply:
            return bool(reply.status == 200)
    except (OSError, http.client.HTTPException):  # not listening yet, or another program's port for now
        return False


def stack_nats(runtime: Path, since: float | None = None) -> tuple[str, dict[str, str]] | None:
    """The launcher's private nats-server (its address) and the identities it made, once both
    exist; with ``since`` (a ``time.time()`` taken before the launch), once this launch has
    written the server's config. A warm start finds the previous start's config there, naming
    a port nothing listens on any more: a connect to it hung the poll for its whole 5 s bound,
    so every warm start measured 5 s or more whatever the stack did."""
    conf = runtime / "nats" / "nats.conf"
    auth = runtime / "nats-auth" / "nats-identities.json"
    try:
        if since is not None and conf.stat().st_mtime < since - 0.05:  # the file clock's coarse tick
            return None
    except FileNotFoundError:
        return None
    if not (conf.exists() and auth.exists()):
        return None
    listen = re.search(r'listen: "([^"]+)"', conf.read_text())
    return (f"nats://{listen[1]}", json.loads(auth.read_text())) if listen else None


def standin_port(launcher: int) -> int | None:
    """The offline stand-in's port (STANDIN_PORT in the environment the launcher gave the host or
    the stand-in's own process), or None with a key."""
    for proc in tree(launcher)[1:]:
        try:
            environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        port = next((v for k, _, v in (e.partition(b"=") for e in environ) if k == b"STANDIN_PORT"), None)
        if port is not None:
            return int(port)
    return None


def standin_answers(launcher: int) -> bool:
    """Offline, whether the stand-in takes connections: a request sent then is answered (its first
    builds the stand-in's app, and those that come meanwhile wait for it: ``deferred``)."""
    port = standin_port(launcher)
    return port is None or listening(f"127.0.0.1:{port}")


def wait_ready(
    launcher: subprocess.Popen[bytes], runtime: Path, port: int, timeout: float, verbose: bool = True,
    since: float | None = None,
) -> None:
    """Until every service answers ready (and, offline, the stand-in takes requests); ``since``:
    the ``time.time()`` of the launch (see ``stack_nats``)."""
    deadline = time.monotonic() + timeout
    pingable = {s for s in SERVICES if prober(s) is not None}
    ready: set[str] = set()
    while time.monotonic() < deadline:
        if launcher.poll() is not None:
            raise RuntimeError(f"the launcher exited with {launcher.returncode}; see {runtime / 'logs'}")
        stack = stack_nats(runtime, since)
        if stack is not None:
            ready = asyncio.run(ping_within(*stack))
        if pingable <= ready and gateway_healthy(port) and standin_answers(launcher.pid):
            unpinged = sorted(set(SERVICES) - pingable - {"gateway"})
            if verbose:
                print(f"ready: {', '.join(sorted(ready | {'gateway'}))} answer"
                      + (", the stand-in listens" if standin_port(launcher.pid) else "")
                      + (f" (no role may ping {', '.join(unpinged)}: CPU idleness covers them)" if unpinged else ""))
            return
        time.sleep(0.05)  # a warm start is timed to within a poll
    raise TimeoutError(f"not ready after {timeout:.0f}s: {sorted(pingable - ready)}")


def wait_idle(root: int, timeout: float) -> float:
    """Until the tree's CPU time advances less than IDLE_CPU_S in two windows in a row."""
    deadline = time.monotonic() + timeout
    quiet = 0
    began = time.monotonic()
    before = cpu_seconds([p.pid for p in tree(root)])
    while time.monotonic() < deadline:
        time.sleep(IDLE_WINDOW_S)
        now = cpu_seconds([p.pid for p in tree(root)])
        quiet = quiet + 1 if now - before < IDLE_CPU_S else 0
        before = now
        if quiet >= 2:
            return time.monotonic() - began
    print(f"warning: still using CPU after {timeout:.0f}s; measuring anyway")
    return time.monotonic() - began


# ---- the floor ------------------------------------------------------------------------------

# What every service process is before any code of its own: the interpreter, asyncio on uvloop,
# pydantic with the contracts, nats-py, connected to the stack's NATS as a role and idle. It
# runs beside the stack, so its PSS shares pages with the services as theirs do.
FLOOR_PROGRAM = r"""
import sys
import delegate.runtime.bus
from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service
from delegate.runtime.settings import ServiceSettings

async def serve(settings, stop):
    bus = await Bus.connect(sys.argv[1], sys.argv[2])  # as the role it logs in as (its inbox prefix)
    print("connected", flush=True)
    await stop.wait()
    await bus.close()

run_service("floor", ServiceSettings(), serve)
"""


def measure_floor(runtime: Path, env: dict[str, str]) -> dict[str, int] | None:
    """The floor process's memory, measured once it is connected and has settled."""
    stack = stack_nats(runtime)
    if stack is None:
        return None
    address, passwords = stack
    role = "voice"  # any service identity: the floor subscribes to nothing of its own
    url = address.replace("nats://", f"nats://{role}:{passwords[role]}@", 1)
    floor = subprocess.Popen([sys.executable, "-c", FLOOR_PROGRAM, url, role], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert floor.stdout is not None
        if floor.stdout.readline().strip() != b"connected":
            return None
        before = -1.0
        while (now := cpu_seconds([floor.pid])) != before:  # settled: no CPU over a window
            before = now
            time.sleep(IDLE_WINDOW_S / 2)
        return memory_kb(floor.pid)
    finally:
        floor.send_signal(signal.SIGTERM)
        try:
            floor.wait(10)
        except subprocess.TimeoutExpired:
            floor.kill()
            floor.wait()


# ---- imports --------------------------------------------------------------------------------


def import_table(log_text: str, top: int) -> list[tuple[str, float, int]]:
    """(top-level package, self import time in ms, modules) from ``-X importtime`` lines."""
    self_us: dict[str, int] = defaultdict(int)
    count: dict[str, int] = defaultdict(int)
    for line in log_text.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|\s*(\S+)", line)
        if match:
            package = match[3].split(".")[0]
            self_us[package] += int(match[1])
            count[package] += 1
    ranked = sorted(self_us, key=lambda p: -self_us[p])[:top]
    return [(p, self_us[p] / 1000, count[p]) for p in ranked]


# ---- main -----------------------------------------------------------------------------------


def launch(workdir: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with open(workdir / "launcher.log", "ab") as out:
        return subprocess.Popen([sys.executable, "-m", "delegate.launcher"], cwd=workdir, env=env,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(launcher: subprocess.Popen[bytes]) -> None:
    if launcher.poll() is None:
        launcher.send_signal(signal.SIGTERM)
        try:
            launcher.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()


def measure(mode: str, endpoint: str, args: argparse.Namespace, floor_wanted: bool) -> dict[str, float]:
    """One stack: idle memory after a first start, then the warm start's time to ready."""
    workdir = Path(tempfile.mkdtemp(prefix=f"delegate-footprint-{mode}-"))
    runtime = workdir / "runtime-data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED)}
    env.update(RUNTIME_DATA_DIR=str(runtime), DELEGATE_PORT=str(port), LOG_LEVEL="INFO", DELEGATE_PROCESSES=mode)
    if endpoint == "key":
        env["OPENAI_API_KEY"] = "sk-footprint-bench-never-sent"
    env.update(item.split("=", 1) for item in args.env)
    if args.imports and mode == "split":
        env["PYTHONPROFILEIMPORTTIME"] = "1"  # each child writes it to stderr: its log file
    answering = "offline (the stand-in answers)" if endpoint == "offline" else "an OpenAI key"
    print(f"\n==== DELEGATE_PROCESSES={mode}, {answering}")
    launcher = launch(workdir, env)
    began = time.monotonic()
    try:
        wait_ready(launcher, runtime, port, args.timeout)
        ready_s = time.monotonic() - began
        idle_s = wait_idle(launcher.pid, args.timeout)
        print(f"first start ready after {ready_s:.1f} s; idle (tree CPU < {IDLE_CPU_S} s per {IDLE_WINDOW_S:.0f} s, "
              f"twice) {idle_s:.1f} s later" + (f"; with {' '.join(args.env)}" if args.env else ""))
        floor = measure_floor(runtime, env) if floor_wanted else None
        total = report(tree(launcher.pid), args.markdown, floor, mode, endpoint)
        if args.imports and mode == "split":
            print_imports(runtime, args.top)
        stop(launcher)
        # Warm starts: the same data, the code in the page cache.
        walls: list[float] = []
        cpus: list[dict[str, float]] = []
        for _ in range(args.warm_rounds or 1):
            since = time.time()
            launcher = launch(workdir, env)
            began = time.monotonic()
            wait_ready(launcher, runtime, port, args.timeout, verbose=False, since=since)
            walls.append(time.monotonic() - began)
            cpus.append(start_cpu_by_process(launcher.pid))
            print(f"warm start: every service ready {walls[-1]:.2f} s after the launch (load average "
                  f"{os.getloadavg()[0]:.1f}); CPU to ready {sum(cpus[-1].values()):.2f} s: "
                  + ", ".join(f"{label} {s:.2f}" for label, s in cpus[-1].items()))
            stop(launcher)
        middle = sorted(range(len(walls)), key=walls.__getitem__)[len(walls) // 2]
        total["warm_s"], total["warm_cpu_s"] = walls[middle], sum(cpus[middle].values())
        if len(walls) > 1:
            print(f"warm start median of {len(walls)}: {total['warm_s']:.2f} s, "
                  f"CPU to ready {total['warm_cpu_s']:.2f} s")
        return total
    finally:
        stop(launcher)
        shutil.rmtree(workdir, ignore_errors=True)


def start_cpu_seconds(launcher: int) -> float:
    """The CPU time the stack used so far: every process in the tree, and the children the
    launcher started and waited for (nats-setup). On a loaded machine the wall time of a start
    follows the load; its CPU time is what a start costs whatever the load."""
    return sum(start_cpu_by_process(launcher).values())


def start_cpu_by_process(launcher: int) -> dict[str, float]:
    """``start_cpu_seconds`` per process (by label; the launcher's waited-for children in its
    own). The host's share is the critical path of a host-mode start: one GIL runs all its
    services' imports and starts, while nats-server and the ledger writer use the other core."""
    try:
        fields = Path(f"/proc/{launcher}/stat").read_text().rsplit(")", 1)[1].split()
        waited = (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")  # cutime, cstime
    except OSError:
        waited = 0.0
    by_label: dict[str, float] = defaultdict(float)
    for proc in tree(launcher):
        label = "ledger writer" if proc.label == "ledger.writer" else proc.label.removesuffix(" (make run)")
        by_label[label] += cpu_seconds([proc.pid]) + (waited if proc.pid == launcher else 0.0)
    return dict(by_label)


def compare_warm_starts(mode: str, endpoint: str, against: Path, rounds: int, timeout: float) -> None:
    """Warm starts of this tree and of ``against``'s code, alternately: the wall time and the
    CPU time to every service ready, median and all, of each."""
    older = os.pathsep.join(str(p) for p in sorted((against / "services").glob("*/src")))
    if not older:
        raise SystemExit(f"--against {against}: no services/*/src there")
    times: dict[str, list[float]] = {"this tree": [], str(against): []}
    cpu: dict[str, list[float]] = {name: [] for name in times}
    process_cpu: dict[str, dict[str, list[float]]] = {name: defaultdict(list) for name in times}
    workdirs = {name: Path(tempfile.mkdtemp(prefix="delegate-footprint-warm-")) for name in times}
    try:
        for round_ in range(rounds + 1):  # round 0 is each stack's first start: not a warm one
            for name, workdir in workdirs.items():
                runtime, port = workdir / "runtime-data", free_port()
                env = {k: v for k, v in os.environ.items() if not k.startswith(INHERITED) and k != "PYTHONPATH"}
                env.update(RUNTIME_DATA_DIR=str(runtime), DELEGATE_PORT=str(port), DELEGATE_PROCESSES=mode)
                if endpoint == "key":
                    env["OPENAI_API_KEY"] = "sk-footprint-bench-never-sent"
                if name != "this tree":
                    env["PYTHONPATH"] = older
                since = time.time()
                launcher = launch(workdir, env)
                began = time.monotonic()
                try:
                    wait_ready(launcher, runtime, port, timeout, verbose=False, since=since)
                    if round_:
                        times[name].append(time.monotonic() - began)
                        by_process = start_cpu_by_process(launcher.pid)
                        cpu[name].append(sum(by_process.values()))
                        for label, seconds in by_process.items():
                            process_cpu[name][label].append(seconds)
                finally:
                    stop(launcher)
    finally:
        for workdir in workdirs.values():
            shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nwarm start to every service ready, DELEGATE_PROCESSES={mode}, {endpoint}, {rounds} alternating rounds, "
          f"load average {os.getloadavg()[0]:.1f}:")
    for name, samples in times.items():
        print(f"  {name:<40} median {sorted(samples)[len(samples) // 2]:6.2f} s  "
              f"({', '.join(f'{t:.2f}' for t in samples)}); CPU to ready median "
              f"{sorted(cpu[name])[len(samples) // 2]:5.2f} s ({', '.join(f'{t:.2f}' for t in cpu[name])})")
        print("    CPU to ready by process, median: " + ", ".join(
            f"{label} {sorted(values)[len(values) // 2]:.2f} s" for label, values in process_cpu[name].items()))


def print_imports(runtime: Path, top: int) -> None:
    print()
    for name in ("openai-standin", *SERVICES):
        text = (runtime / "logs" / f"{name}.log").read_text(errors="replace")
        rows = import_table(text, top)
        total = sum(float(line.split("|")[0].split(":")[1]) for line in text.splitlines()
                    if line.startswith("import time:") and line.split("|")[0].split(":")[1].strip().isdigit())
        print(f"{name}: {total / 1000:.0f} ms of imports; top packages by self time")
        for package, ms, modules in rows:
            print(f"    {package:<28} {ms:8.1f} ms  {modules:5d} modules")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default=",".join(MODES), help="split, host or both (default: both)")
    parser.add_argument("--endpoints", default=",".join(ENDPOINTS), help="offline, key or both (default: both)")
    parser.add_argument("--imports", action="store_true", help="per service, the packages its start imports (split)")
    parser.add_argument("--top", type=int, default=12, help="packages shown per service with --imports")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting for the launcher and every child (repeatable)")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--markdown", action="store_true", help="also print the tables as markdown")
    parser.add_argument("--against", type=Path, help="a checkout to compare warm starts with (only that)")
    parser.add_argument("--warm-rounds", type=int, default=None,
                        help="warm starts of each stack, the median reported (default: 1; 5 with --against)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m in MODES]
    endpoints = [e for e in args.endpoints.split(",") if e in ENDPOINTS]
    if args.against is not None:
        for endpoint in endpoints:
            for mode in modes:
                compare_warm_starts(mode, endpoint, args.against.resolve(), args.warm_rounds or 5, args.timeout)
        return
    results: dict[tuple[str, str], dict[str, float]] = {}
    for endpoint in endpoints:
        for mode in modes:
            results[(mode, endpoint)] = measure(mode, endpoint, args, floor_wanted=mode == "split")
    print(f"\n{'stack':<26} {'processes':>9} {'RSS MB':>8} {'PSS MB':>8} {'warm start s':>12} {'CPU s':>6}  target")
    for (mode, endpoint), r in results.items():
        limit = HOST_TARGET_MB[endpoint] if mode == "host" else TARGET_MB
        memory = f"RSS <= {limit} MB: {'within' if r['rss'] <= limit else 'over'}"
        warm = "within" if r["warm_s"] <= WARM_START_TARGET_S else "over"
        print(f"{mode + ', ' + endpoint:<26} {r['processes']:>9.0f} {r['rss']:8.1f} {r['pss']:8.1f} "
              f"{r['warm_s']:12.2f} {r['warm_cpu_s']:6.2f}  {memory}; warm start <= {WARM_START_TARGET_S} s: {warm}")
    for endpoint in endpoints:
        if ("split", endpoint) in results and ("host", endpoint) in results:
            split, host = results[("split", endpoint)], results[("host", endpoint)]
            print(f"{endpoint}: one host is {host['rss'] / split['rss']:.2f}x the split stack's RSS, "
                  f"{host['pss'] / split['pss']:.2f}x its PSS, {host['warm_s'] / split['warm_s']:.2f}x its warm start")


def report(
    procs: list[Proc], markdown: bool, floor: dict[str, int] | None, mode: str, endpoint: str
) -> dict[str, float]:
    rows: list[tuple[str, int, dict[str, int]]] = []
    chromium = [p for p in procs if is_chromium(p)]
    parents = {p.pid: p for p in procs}
    for proc in procs:
        if proc in chromium:
            continue
        label = proc.label
        parent = parents.get(proc.ppid)
        if label == "ledger.writer" or (parent is not None and parent.label == label and label == "ledger"):
            label = "ledger writer"
        try:
            rows.append((label, proc.pid, memory_kb(proc.pid)))
        except OSError:
            continue
    base = floor["rss"] / 1024 if floor else 0.0

    def above(label: str, mem: dict[str, int]) -> str:
        return "" if not floor or label == "nats-server" else f"{mem['rss'] / 1024 - base:+8.1f}"

    print(f"\n{'process':<22} {'pid':>8} {'RSS MB':>8} {'PSS MB':>8} {'USS MB':>8} {'RSS-floor':>9}")
    for label, pid, mem in rows:
        print(f"{label:<22} {pid:>8} {mem['rss'] / 1024:8.1f} {mem['pss'] / 1024:8.1f} {mem['uss'] / 1024:8.1f} "
              f"{above(label, mem):>9}")
    total = {k: sum(m[k] for _, _, m in rows) / 1024 for k in ("rss", "pss", "uss")}
    print(f"{'total (' + str(len(rows)) + ' processes)':<22} {'':>8} {total['rss']:8.1f} {total['pss']:8.1f} "
          f"{total['uss']:8.1f}")
    target = HOST_TARGET_MB[endpoint] if mode == "host" else TARGET_MB
    verdict = "within" if total["rss"] <= target else "over"
    print(f"target: RSS total <= {target} MB without Chromium: {verdict} ({total['rss']:.0f} MB)")
    pythons = sum(1 for label, _, _ in rows if label != "nats-server")
    if floor:
        print(f"floor: a Python process with only the bus and service runtime, connected and idle: "
              f"{base:.1f} MB RSS, {floor['pss'] / 1024:.1f} MB PSS; {pythons} Python processes x floor = "
              f"{pythons * base:.0f} MB RSS before any code of their own ({total['rss'] / (pythons * base):.2f}x "
              f"the floor for the whole stack)")
    print("Chromium: " + (f"{len(chromium)} processes running at idle, excluded (they should not be)"
                          if chromium else "not running (excluded by design: tasks launches it when a task browses)"))
    if markdown:
        print("\n| process | RSS MB | PSS MB | USS MB | RSS above the floor |\n|---|---:|---:|---:|---:|")
        for label, _, mem in rows:
            print(f"| {label} | {mem['rss'] / 1024:.0f} | {mem['pss'] / 1024:.0f} | {mem['uss'] / 1024:.0f} | "
                  f"{above(label, mem).strip()} |")
        print(f"| **total** | **{total['rss']:.0f}** | **{total['pss']:.0f}** | **{total['uss']:.0f}** | |")
        print(f"| target | ≤ {target} | | | |")
    return {**total, "processes": float(len(rows))}


if __name__ == "__main__":
    main()
