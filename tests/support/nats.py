"""A private nats-server for tests: never the machine's shared one, so tests may kill it.

Authentication is on by default, as in ``make run``: every service role has its own user
with the permissions of delegate.contracts.roles, and ``NatsServer.url`` logs in as ``test``,
an identity allowed everything, so test code can seed and inspect the bus. ``System`` hands
each service process only its own role's credentials. DELEGATE_TEST_NATS_AUTH=0 turns
authentication off (for the benchmark comparison, and to tell a missing permission apart
from a real failure).
"""

import os
import secrets
import shutil
from pathlib import Path
from typing import Protocol

import pytest

from delegate.contracts.roles import ROLES
from delegate.launcher.identities import child_env
from delegate.launcher.natsconf import NatsUser, role_users
from delegate.launcher.procs import ManagedProcess, NatsServer, nats_server_binary, wait_for_port

TEST_USER = "test"

# Debian's own nats-server package (2.9.10 on bookworm): older than what reminders and atomic
# batches need. .ci/run installs it; the tests that show a service refusing it start it.
DEBIAN_NATS = "/usr/sbin/nats-server"


def auth_enabled() -> bool:
    return os.environ.get("DELEGATE_TEST_NATS_AUTH", "1") != "0"


def require_nats_binary() -> str:
    """The binary, or a skip locally; on CI (CI set) a missing binary fails the run."""
    try:
        return nats_server_binary()
    except FileNotFoundError:
        if os.environ.get("CI"):
            pytest.fail("nats-server is missing on CI: `make install` must provide it")
        pytest.skip("nats-server not installed")
        raise


def nats_server(store: Path, *, auth: bool | None = None, sync_always: bool = True) -> NatsServer:
    """A server (not yet started) with one user per role plus the all-powerful test user."""
    if not (auth_enabled() if auth is None else auth):
        return NatsServer(store, sync_always=sync_always)
    passwords = {role: secrets.token_urlsafe(16) for role in ROLES}
    test = NatsUser(TEST_USER, secrets.token_urlsafe(16))
    return NatsServer(store, sync_always=sync_always, users=[*role_users(passwords), test], client=test)


def start_nats(store: Path, *, auth: bool | None = None) -> NatsServer:
    require_nats_binary()
    if store.exists():
        shutil.rmtree(store)
    return nats_server(store, auth=auth).start()


def start_debian_nats(store: Path) -> NatsServer:
    """Debian's nats-server with the users ``start_nats`` gives (2.9 knows no ``sync_interval``)."""
    if not os.access(DEBIAN_NATS, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"{DEBIAN_NATS} is missing on CI: .ci/run must install Debian's nats-server package")
        pytest.skip("Debian's nats-server package is not installed")
    if store.exists():
        shutil.rmtree(store)
    server = nats_server(store, sync_always=False)
    server.proc = ManagedProcess(
        "nats", [DEBIAN_NATS, "-c", str(server._config())], dict(os.environ), store / "nats.log"
    ).start()
    assert server.proc.proc is not None
    wait_for_port(server.port, 15.0, server.proc.proc)
    return server


def upgraded(server: NatsServer, store: Path) -> NatsServer:
    """The pinned nats-server on ``server``'s port with its users (not yet started): the same
    address after an upgrade, which its clients reconnect to by themselves."""
    return NatsServer(store, port=server.port, users=server.users, client=server.client)


class NatsEndpoint(Protocol):
    """What a role's login needs of a server or a cluster (tests.support.cluster.NatsCluster)."""

    @property
    def address(self) -> str: ...

    def url_as(self, user: NatsUser) -> str: ...

    def user(self, name: str) -> NatsUser | None: ...


def role_env(server: NatsEndpoint, role: str) -> dict[str, str]:
    """What a service process of ``role`` needs to log in: its own identity, nothing more."""
    user = server.user(role)
    if user is None:  # authentication off
        return {}
    return child_env(role, {role: user.password})


def role_url(server: NatsEndpoint, role: str) -> str:
    """The server as ``role``'s identity (the URL carries it), for tests acting as that role."""
    user = server.user(role)
    return server.address if user is None else server.url_as(user)
