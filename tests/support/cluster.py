"""Three nats-servers as one JetStream cluster on loopback: routes, R3 streams, no Docker.

Each node is the tests' ordinary private server (``NatsServer``: its own port and store,
the same users and permissions as ``tests/support/nats.py`` renders) plus a ``server_name``
and a ``cluster`` block routing to the other two. ``NatsCluster`` looks like one server to
``System`` and to test code: ``address`` and ``url`` are the seed list, ``user`` the shared
identities. Any one node may be killed and restarted on its own store.
"""

import asyncio
import contextlib
import json
import shutil
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import nats
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import StorageType, StreamConfig

from delegate.launcher.natsconf import NatsUser
from delegate.launcher.procs import NatsServer, free_port

from .nats import nats_server, require_nats_binary
from .system import run_sync

CLUSTER_NAME = "delegate-test"


class ClusterNode(NatsServer):
    """One member: the single test server's config, with a name and routes to its peers."""

    def __init__(self, store_dir: Path, name: str, cluster_port: int, routes: list[int], template: NatsServer) -> None:
        super().__init__(store_dir, sync_always=template.sync_always, users=template.users, client=template.client)
        self.name = name
        self.cluster_port = cluster_port
        self.routes = routes

    def _config(self) -> Path:
        conf = super()._config()
        routes = ", ".join(json.dumps(f"nats-route://127.0.0.1:{port}") for port in self.routes)
        with open(conf, "a") as out:  # appended: keeps the file's owner-only mode
            out.write(
                f"server_name: {json.dumps(self.name)}\n"
                f"cluster {{\n  name: {json.dumps(CLUSTER_NAME)}\n"
                f'  listen: "127.0.0.1:{self.cluster_port}"\n  routes: [{routes}]\n}}\n'
            )
        return conf


class NatsCluster:
    """Three ``ClusterNode``s; quacks like ``NatsServer`` where ``System`` and the tests need it."""

    def __init__(self, root: Path, *, size: int = 3, auth: bool | None = None, sync_always: bool = True) -> None:
        # One template renders the users (and their passwords) every node shares.
        self.template = nats_server(root / "template", auth=auth, sync_always=sync_always)
        cluster_ports = [free_port() for _ in range(size)]
        self.nodes = [
            ClusterNode(
                root / f"n{i}", f"n{i}", port, [p for p in cluster_ports if p != port], self.template
            )
            for i, port in enumerate(cluster_ports)
        ]

    # ---- what a NatsServer offers --------------------------------------------------------

    @property
    def users(self) -> tuple[NatsUser, ...]:
        return self.template.users

    @property
    def client(self) -> NatsUser | None:
        return self.template.client

    @property
    def address(self) -> str:
        """The seed list without credentials (NATS_URL for a service with its own identity)."""
        return ",".join(node.address for node in self.nodes)

    @property
    def url(self) -> str:
        """The seed list as the all-powerful test identity."""
        return ",".join(node.url for node in self.nodes)

    def url_as(self, user: NatsUser) -> str:
        return ",".join(node.url_as(user) for node in self.nodes)

    def user(self, name: str) -> NatsUser | None:
        return self.template.user(name)

    def start(self, timeout: float = 30.0) -> "NatsCluster":
        require_nats_binary()
        for node in self.nodes:
            if node.store_dir.exists():
                shutil.rmtree(node.store_dir)
            node.start()
        wait_for_meta_leader(self.url, timeout)
        wait_for_peers(self.url, len(self.nodes), timeout)
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def node(self, name: str) -> ClusterNode:
        return next(node for node in self.nodes if node.name == name)


async def _until_answered(url: str, deadline: float, ask: Callable[[JetStreamContext], Awaitable[object]]) -> None:
    """Ask the cluster ``ask`` until it answers (it is not up, or not whole, until then)."""
    nc = None
    try:
        nc = await nats.connect(
            servers=url.split(","), connect_timeout=1, max_reconnect_attempts=-1, reconnect_time_wait=0.1
        )
        js = nc.jetstream(timeout=2.0)
        while True:
            try:
                await ask(js)
                return
            except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError):
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)
    finally:
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()


def wait_for_meta_leader(url: str, timeout: float = 30.0) -> None:
    """Block until JetStream answers on the cluster (it has elected a meta leader)."""
    run_sync(_until_answered(url, time.monotonic() + timeout, lambda js: js.account_info()))


PROBE_STREAM = "CLUSTER_READY_PROBE"


async def _place_probe(js: JetStreamContext, replicas: int) -> None:
    probe = StreamConfig(
        name=PROBE_STREAM, subjects=["cluster-ready-probe"], storage=StorageType.MEMORY, num_replicas=replicas
    )
    await js.add_stream(probe)
    await js.delete_stream(PROBE_STREAM)


def wait_for_peers(url: str, replicas: int, timeout: float = 30.0) -> None:
    """Block until a stream of ``replicas`` copies can be placed.

    A meta leader needs only a quorum: on a loaded machine the last node has not joined yet,
    and an R3 stream is refused ("no suitable peers for placement") until it has. Creating one
    is the only question the cluster answers exactly.
    """
    run_sync(_until_answered(url, time.monotonic() + timeout, lambda js: _place_probe(js, replicas)))
