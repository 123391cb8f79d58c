"""Real service processes for end-to-end tests, run as ``make run`` runs them; forked from an
interpreter that has imported their code already (``forked``), not started afresh."""

import asyncio
import os
import secrets
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from delegate.launcher.procs import ManagedProcess, NatsServer, free_port
from delegate.runtime.bus import Bus
from delegate.runtime.settings_source import password_variable

from .forked import ForkedProcess
from .nats import role_env, start_nats

if TYPE_CHECKING:
    from .cluster import NatsCluster

# A service process must log in with the identity System gives it, never one inherited.
_INHERITED = ("OPENAI_", "TWILIO_", "IMAP_", "SMTP_", "NATS_")

# Stopped as the launcher stops them (delegate.launcher.run.STOP_STAGES): the gateway first,
# then every other service together, the ledger (which commits what they sent) after them.
FIRST_TO_STOP = ("gateway",)
LAST_TO_STOP = ("ledger",)

MODULES = {
    "ledger": "delegate.ledger",
    "agent": "delegate.agent",
    "inner-plane": "delegate.inner_plane",
    "memory": "delegate.memory",
    "tasks": "delegate.tasks",
    "voice": "delegate.voice",
    "pollers": "delegate.pollers",
    "gateway": "delegate.gateway",
}


def run_sync(coro: object) -> object:
    """Run a coroutine to completion from sync code, even inside a running event loop."""
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)  # type: ignore[arg-type]
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box.get("value")


# How long a start may take before the test fails. Typically a second; but two test workers plus
# other load on two cores made a gateway's first JetStream setup time out and retry past 30 s.
# A wait, not a measure: speed is the bench scripts' business.
READY_WAIT_S = 60.0


# `make test DELEGATE_TEST_PROCESSES=split`: the whole suite with a process per service.
SPLIT_VARIABLE = "DELEGATE_TEST_PROCESSES"


class Processes(dict[str, ManagedProcess]):
    """A System's processes by name. A service in the shared host has no process of its own: asking
    for one (to kill, stop or restart it alone) says how to give it one, instead of a bare KeyError
    or, worse, acting on the whole host."""

    def __init__(self, system: "System") -> None:
        super().__init__()
        self._system = system

    def __missing__(self, name: str) -> ManagedProcess:
        host = self._system.hosted.get(name)
        if host is not None:
            raise KeyError(
                f"{name!r} runs in the System's host process {host!r}: to act on it alone, start it"
                f" with separate=({name!r},)"
            )
        raise KeyError(name)


# Every System this test process made, for the failure report (tests/conftest.py): a test that
# fails in CI shows what its services logged, not only what the test saw.
SYSTEMS: list["System"] = []


class System:
    """nats-server + chosen services as real processes, sharing one runtime dir.

    Each service process logs in as its own role (see tests/support/nats.py); ``nats.url``
    is the test code's own all-powerful identity.
    """

    created_count = 0  # in this process, ever: the suite's figures count Systems per file

    def __init__(
        self,
        root: Path,
        *,
        env: dict[str, str] | None = None,
        nats: "NatsServer | NatsCluster | None" = None,
        separate: Iterable[str] = (),
    ) -> None:
        """``separate``: services that always get a process of their own (see ``start``)."""
        self.root = root
        self.separate = set(separate)
        self.separate_all = False  # set by start(..., separate=True), for every later start too
        self.runtime = root / "runtime-data"
        self.logs = root / "logs"
        self.nats = nats
        self.port = free_port()
        self.token = secrets.token_urlsafe(16)
        self.extra_env = env or {}
        self.procs: Processes = Processes(self)
        self.services: dict[str, str] = {}  # instance -> the service it runs
        self.hosted: dict[str, str] = {}  # service -> the host process (start_host) running it
        self._counter = 0
        self.created = time.monotonic()
        self.stopped = False
        SYSTEMS.append(self)
        System.created_count += 1

    @property
    def env(self) -> dict[str, str]:
        assert self.nats is not None
        base = {k: v for k, v in os.environ.items() if not k.startswith(_INHERITED)}
        return {
            **base,
            "NATS_URL": self.nats.address,  # no credentials: each process gets its role's own
            "RUNTIME_DATA_DIR": str(self.runtime),
            "DELEGATE_PORT": str(self.port),
            "DELEGATE_TOKEN": self.token,
            "PYTHONUNBUFFERED": "1",
            "LOG_LEVEL": "INFO",
            **self.extra_env,
        }

    @property
    def nats_url(self) -> str:
        """The bus as the all-powerful test identity, once NATS is up."""
        assert self.nats is not None
        return self.nats.url

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def start_nats(self) -> None:
        if self.nats is None:
            self.nats = start_nats(self.root / "nats")

    def start(
        self, *names: str, wait: bool = True, separate: Iterable[str] | bool = (), one_process: bool = False
    ) -> "System":
        """The named services, as ``make run`` runs them: in one host process (``start_host``), each
        logging in as its own role. ``separate``: the services that get a process of their own
        (``True``: every one), those a test kills, stops or restarts alone; they stay separate in
        later starts (a killed one started again). A second ``start`` starts a second host.
        DELEGATE_TEST_PROCESSES=split gives every service its own process, as
        ``DELEGATE_PROCESSES=split`` does for ``make run``; ``one_process`` keeps the host even then.

        Why a host by default: a process per service costs the suite ~10 s of CPU per System
        started and stopped, one host ~4 s, and most tests start one."""
        self.start_nats()
        if separate is True:
            self.separate_all = True
        elif separate is not False:
            self.separate.update(separate)
        split_all = self.separate_all or (os.environ.get(SPLIT_VARIABLE, "").lower() == "split" and not one_process)
        alone = set(names) if split_all else self.separate
        hosted = [name for name in names if name not in alone]
        if hosted:
            self.start_host(*hosted, key=self._host_key())
        for name in names:
            if name in alone:
                self.start_one(name)
        if wait:
            self.wait_ready(names)
        return self

    def _host_key(self) -> str:
        hosts = sum(1 for service in self.services.values() if service == "host")
        return "host" if hosts == 0 else f"host-{hosts + 1}"

    def start_host(self, *names: str, key: str = "host", env: dict[str, str] | None = None) -> ManagedProcess:
        """``python -m delegate.host --services <names>``: one process, each service logging in
        as its own role (one NATS_PASSWORD_<ROLE> each, as the launcher gives its host). The
        process is ``procs[key]``: ``kill(key)`` and ``restart(key)`` act on every service in it."""
        self._counter += 1
        assert self.nats is not None
        identities = {}
        for name in names:
            user = self.nats.user(name)
            if user is not None:
                identities[password_variable(name)] = user.password
        merged = {**self.env, **identities, **self.extra_env, **(env or {})}
        proc = ForkedProcess(
            key, "delegate.host", ["--services", ",".join(names)], merged, self.logs / f"{key}.{self._counter}.log"
        ).start()
        self.procs[key] = proc
        self.services[key] = "host"
        self.hosted.update({name: key for name in names})
        return proc

    def start_one(self, name: str, instance: str | None = None, env: dict[str, str] | None = None) -> ManagedProcess:
        """``env`` is merged last: e.g. a second gateway instance's own DELEGATE_PORT."""
        self._counter += 1
        key = instance or name
        assert self.nats is not None
        merged = {**self.env, "INSTANCE_NAME": key, **role_env(self.nats, name), **self.extra_env, **(env or {})}
        proc = ForkedProcess(key, MODULES[name], [], merged, self.logs / f"{key}.{self._counter}.log").start()
        self.procs[key] = proc
        self.services[key] = name
        return proc

    def wait_ready(self, names: Iterable[str], timeout: float = READY_WAIT_S) -> None:
        run_sync(self._wait_ready(list(names), timeout))

    async def _wait_ready(self, names: list[str], timeout: float) -> None:
        # One probe connection for the whole wait (not one per poll), polled often: a service
        # is typically ready within a second, and every test that starts one waits for it.
        assert self.nats is not None
        deadline = time.monotonic() + timeout
        pending = set(names)
        bus: Bus | None = None
        try:
            async with httpx.AsyncClient(timeout=0.5) as http:
                while pending and time.monotonic() < deadline:
                    for name in sorted(pending):
                        proc = self.procs.get(self.hosted.get(name, name))
                        if proc is not None and not proc.alive():
                            raise RuntimeError(f"{name} died during start:\n{proc.log_text()[-4000:]}")
                        if self.services.get(name, name) == "gateway":
                            ready = await self._gateway_ready(http, name)
                        else:
                            bus = bus or await Bus.connect(self.nats.url, "test-probe")
                            ready = await self._pong(bus, name)
                        if ready:
                            pending.discard(name)
                    if pending:
                        await asyncio.sleep(0.05)
        finally:
            if bus is not None:
                await bus.nc.close()
        if pending:
            logs = "\n".join(f"--- {n}\n{self.procs[n].log_text()[-3000:]}" for n in pending if n in self.procs)
            raise TimeoutError(f"not ready after {timeout}s: {sorted(pending)}\n{logs}")

    def http_of(self, instance: str) -> str:
        """A gateway instance's base URL: its own DELEGATE_PORT (start_one's ``env``), else the System's."""
        proc = self.procs.get(instance)
        port = proc.env.get("DELEGATE_PORT") if proc is not None else None
        return f"http://127.0.0.1:{port or self.port}"

    async def _gateway_ready(self, http: httpx.AsyncClient, instance: str = "gateway") -> bool:
        """Serving HTTP *and* attached to the bus: /healthz answers while the bus still connects in
        the background, and a hello sent then is told "try again later" (1013)."""
        try:
            r = await http.get(f"{self.http_of(instance)}/readyz", timeout=3)  # pings inside
        except httpx.HTTPError:
            return False
        if r.status_code == 200:
            return True
        body = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
        return r.status_code == 503 and "nats" not in body.get("missing", ["nats"])

    @staticmethod
    async def _pong(bus: Bus, name: str) -> bool:
        try:
            return (await bus.ping(name, timeout=0.5)).ready
        except Exception:
            return False

    def kill(self, name: str) -> None:
        self.procs[name].kill()

    def restart(self, name: str, wait: bool = True) -> None:
        """``name``: a service of its own process, or a host (every service in it comes back)."""
        self.procs[name].stop()
        self.procs[name].start()
        if wait:
            self.wait_ready([service for service, host in self.hosted.items() if host == name] or [name])

    def stop(self) -> None:
        """Stage by stage, each stage's processes signalled together (their exits overlap), NATS last."""
        first = [k for k in self.procs if self.services.get(k) in FIRST_TO_STOP]
        last = [k for k in self.procs if self.services.get(k) in LAST_TO_STOP]
        middle = [k for k in reversed(list(self.procs)) if k not in first and k not in last]
        for stage in (first, middle, last):
            for key in stage:
                proc = self.procs[key]
                if proc.alive() and proc.proc is not None:
                    proc.proc.send_signal(signal.SIGTERM)
            for key in stage:
                self.procs[key].stop()
        if self.nats is not None:
            self.nats.stop()
        self.stopped = True

    def logged_since(self, monotonic: float) -> bool:
        """Whether any of its processes wrote to its log since then (``time.monotonic()``)."""
        wall = time.time() - (time.monotonic() - monotonic)
        return any(p.log_path.exists() and p.log_path.stat().st_mtime >= wall for p in self.procs.values())

    def dump_logs(self, tail: int = 6000) -> str:
        """The last ``tail`` characters of each process's log (a failure message's share)."""
        return "\n".join(f"===== {k}\n{p.log_text()[-tail:]}" for k, p in self.procs.items())


ARTIFACTS = Path(__file__).resolve().parents[2] / "test-output" / "logs"
# What a failed test keeps of each process's log: enough to read the whole test (a shared
# System's tail was only the last test's polling).
ARTIFACT_LOG_CHARS = 2_000_000


@contextmanager
def module_system(
    root: Path,
    request: Any,
    *services: str,
    env: dict[str, str] | None = None,
    separate: Iterable[str] | bool = (),
    extra_log: Callable[[], str] = lambda: "",
) -> Iterator[System]:
    """A System shared by a whole test module (``request`` is the module fixture's): started
    here (``separate`` as for ``System.start``), stopped at the end, its logs kept under
    test-output/logs/<module> when a test of the module failed."""
    failed = request.session.testsfailed
    system = System(root, env=env)
    try:
        system.start(*services, separate=separate)
        yield system
    finally:
        system.stop()
        if request.session.testsfailed > failed:
            out = ARTIFACTS / request.module.__name__.rsplit(".", 1)[-1]
            out.mkdir(parents=True, exist_ok=True)
            (out / "services.log").write_text(system.dump_logs(ARTIFACT_LOG_CHARS) + extra_log())


@asynccontextmanager
async def probe_bus(system: System) -> AsyncIterator[Bus]:
    """The test code's own all-powerful connection to a started System's NATS."""
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test-probe")
    try:
        yield bus
    finally:
        await bus.close()


@asynccontextmanager
async def owner_http(system: System, timeout: float = 60) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client for a started System's gateway, signed in with the owner token.

    It keeps no idle connection: the gateway (uvicorn) closes one after 5 s, and a request sent
    on it just as it closes fails with "Server disconnected" (the stand-in's control client did)."""
    no_idle = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=system.http, headers=system.auth(), timeout=timeout, limits=no_idle
    ) as client:
        yield client
