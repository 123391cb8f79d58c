"""deploy/healthcheck.py against real nats-servers run with compose's config and flags.

Each server gets the config `python -m delegate.launcher nats-config` renders (the text of
deploy/nats.conf, on private ports); the cluster's nodes get the flags compose.yaml gives
nats-1..3. A service that answers its ping, asked as its own identity, and says it is ready
passes its check; one that does not answer, is not ready, or is asked with a wrong password
fails it. An nkey identity is checked on the monitoring endpoint instead.
"""

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from delegate.contracts.roles import ROLES
from delegate.launcher.natsconf import operator_config, password_variable
from delegate.launcher.procs import free_port
from delegate.runtime.bus import Bus
from tests.support.nats import require_nats_binary
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PASSWORDS = {role: f"pw-{role}" for role in ROLES}
NODES = ("nats-1", "nats-2", "nats-3")


class Node:
    def __init__(self, store: Path) -> None:
        self.store = store
        self.port, self.monitor, self.route = free_port(), free_port(), free_port()

    @property
    def address(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def config(self) -> Path:
        self.store.mkdir(parents=True, exist_ok=True)
        conf = self.store / "nats.conf"
        conf.write_text(operator_config(listen=f"127.0.0.1:{self.port}", http=f"127.0.0.1:{self.monitor}",
                                        store_dir=str(self.store / "js")))
        return conf


def _healthy(monitor: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{monitor}/healthz", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def _servers(nodes: list[Node], extra: list[list[str]]) -> Iterator[None]:
    binary = require_nats_binary()
    env = {**os.environ, **{password_variable(role): pw for role, pw in PASSWORDS.items()}}
    procs = []
    try:
        for node, flags in zip(nodes, extra, strict=True):
            log = (node.store.parent / f"{node.store.name}.log").open("wb")
            procs.append(subprocess.Popen([binary, "-c", str(node.config()), *flags], env=env,
                                          stdout=log, stderr=subprocess.STDOUT))
        def healthy() -> bool:
            if all(_healthy(n.monitor) for n in nodes):
                return True
            exited = [n for n, p in zip(nodes, procs, strict=True) if p.poll() is not None]
            assert not exited, "a nats-server exited:\n" + "\n".join(
                (n.store.parent / f"{n.store.name}.log").read_text()[-2000:] for n in exited
            )
            return False

        eventually_sync(healthy, "nats-server healthy (JetStream up; on a cluster, a meta leader)", 30, interval=0.2)
        yield
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


async def _check(
    service: str, nats_url: str, monitor: int, *, password: str | None = None, nkey: bool = False
) -> int:
    """The check's exit code; run in a thread, so that a ping served by this test's loop is answered."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "DELEGATE_"))}
    env.update(NATS_URL=nats_url, NATS_USER=service, NATS_MONITOR_PORT=str(monitor),
               NATS_PASSWORD=PASSWORDS[service] if password is None else password)
    if nkey:  # the check cannot sign with it, so it asks the monitoring endpoint
        env["NATS_NKEY_SEED"] = "/run/secrets/nkey"
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(ROOT / "deploy" / "healthcheck.py"), service], env=env,
        capture_output=True, text=True, timeout=30,
    )
    return done.returncode


async def _serving(service: str, url: str, monkeypatch: pytest.MonkeyPatch, *, ready: bool = True) -> Bus:
    """A connection as ``service``'s own identity, answering its ping (as the service does)."""
    monkeypatch.setenv("NATS_USER", service)
    monkeypatch.setenv("NATS_PASSWORD", PASSWORDS[service])
    bus = await Bus.connect(url, service, replicas=1)
    await bus.serve_ping(service, ready=lambda: ready, detail="" if ready else "still starting")
    await bus.nc.flush()
    return bus


async def test_a_service_is_healthy_once_its_own_identity_serves_its_ping(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = Node(tmp_path / "nats")
    with _servers([node], [[]]):
        assert await _check("memory", node.address, node.monitor) == 1  # not connected yet
        bus = await _serving("memory", node.address, monkeypatch)
        try:
            assert await _check("memory", node.address, node.monitor) == 0
            assert await _check("memory", node.address, node.monitor, password="wrong") == 1
            assert await _check("pollers", node.address, node.monitor) == 1  # another identity proves nothing
            # a seed list whose first server is down: the others are asked
            assert await _check("memory", f"nats://127.0.0.1:{free_port()},{node.address}", node.monitor) == 0
            assert await _check("memory", node.address, node.monitor, nkey=True) == 0
            assert await _check("pollers", node.address, node.monitor, nkey=True) == 1
        finally:
            await bus.close()
        assert await _check("memory", node.address, node.monitor) == 1
        assert await _check("memory", node.address, node.monitor, nkey=True) == 1
        starting = await _serving("voice", node.address, monkeypatch, ready=False)
        try:
            assert await _check("voice", node.address, node.monitor) == 1  # it answers, but is not ready
        finally:
            await starting.close()


async def test_the_cluster_profile_nodes_form_a_jetstream_cluster_and_the_check_finds_services_on_any_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nodes = [Node(tmp_path / name) for name in NODES]
    # compose.yaml's flags for each node, its hosts and ports replaced by this machine's
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    routes = ",".join(f"nats://127.0.0.1:{n.route}" for n in nodes)
    flags = []
    for name, node in zip(NODES, nodes, strict=True):
        command = list(services[name]["command"])
        assert command[:2] == ["-c", "/etc/nats/nats.conf"]
        command[command.index("--cluster") + 1] = f"nats://127.0.0.1:{node.route}"
        command[command.index("--routes") + 1] = routes
        flags.append(command[2:])
    monitors = {n.monitor for n in nodes}
    assert len(monitors) == 3
    with _servers(nodes, flags):
        for node in nodes:  # one JetStream cluster of three, with a leader
            with urllib.request.urlopen(f"http://127.0.0.1:{node.monitor}/jsz", timeout=5) as response:
                meta = json.load(response)["meta_cluster"]
            assert meta["cluster_size"] == 3 and meta.get("leader"), meta
        bus = await _serving("tasks", nodes[1].address, monkeypatch)  # connected to the second node
        try:
            seeds = ",".join(n.address for n in nodes)
            # the ping goes through whichever node the check reaches first
            assert await _check("tasks", seeds, nodes[0].monitor) == 0
            assert await _check("tasks", nodes[2].address, nodes[0].monitor) == 0
            # the monitoring fallback: compose asks each seed's host on port 8222; here the nodes
            # share a host and differ in their monitoring port: the node the service is on sees it
            assert await _check("tasks", seeds, nodes[1].monitor, nkey=True) == 0
            assert await _check("tasks", seeds, nodes[0].monitor, nkey=True) == 1
        finally:
            await bus.close()
