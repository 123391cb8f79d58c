"""The role table covers the contracts, and the configs rendered from it are the ones shipped."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest

from delegate.contracts import roles, streams, topics
from delegate.contracts.roles import ROLES, permissions
from delegate.launcher import identities
from delegate.launcher.natsconf import operator_config, password_variable
from delegate.launcher.procs import ManagedProcess, free_port, nats_server_binary, wait_for_port
from delegate.launcher.run import service_env
from delegate.runtime.credentials import NatsCredentials, connect_options
from tests.support.nats import require_nats_binary

ROOT = Path(__file__).resolve().parents[2]


def _contract_topics() -> list[topics.Topic[object]]:
    return [v for v in vars(topics).values() if isinstance(v, topics.Topic)]


def _contract_queries() -> list[topics.Query[Any, Any]]:
    found = [v for v in vars(topics).values() if isinstance(v, topics.Query)]
    return found + list(topics.PINGS.values())


def test_every_topic_has_a_publisher_and_every_durable_one_a_consumer() -> None:
    published = {t.subject for r in ROLES.values() for t in (*r.publishes, *r.emits)}
    listened = {t.subject for r in ROLES.values() for t in r.subscribes}
    consumed = {c.topic.subject for r in ROLES.values() for c in r.consumes}
    for topic in _contract_topics():
        if topic is topics.LEDGER_APPEND_ANY:  # the filter: each role publishes its own subject
            assert topic.subject in consumed
            assert all(topics.ledger_append(name).subject in published for name in ROLES)
            continue
        if topic is topics.INNER_SCHEDULE_ANY:  # a schedule is read by JetStream itself ...
            assert topic.subject in published
            continue
        if topic is topics.INNER_FIRE:  # ... which publishes its body on the target when due
            assert topic.subject in consumed
            continue
        assert topic.subject in published, f"nobody publishes {topic.subject}"
        assert topic.subject in listened | consumed, f"nobody reads {topic.subject}"


def test_every_query_is_served_by_exactly_one_role() -> None:
    for query in _contract_queries():
        servers = [r.name for r in ROLES.values() if query in r.serves]
        assert len(servers) == 1, (query.subject, servers)


def test_every_ping_is_served_by_its_own_role() -> None:
    for name, query in topics.PINGS.items():
        assert query in ROLES[name].serves, name


def test_every_stream_has_an_owner_role_and_every_consumer_a_stream() -> None:
    names = {spec.name for spec in streams.STREAMS}
    for spec in streams.STREAMS:
        assert spec.owner in ROLES, spec
        assert spec.name in ROLES[spec.owner].owns
    durables = [c.durable for r in ROLES.values() for c in r.consumes]
    assert sorted(durables) == sorted({streams.LEDGER_WRITER, streams.AGENT_WORKER, streams.INNER_BROKER,
                                       streams.INNER_REMINDERS, streams.POLLERS_SMS, streams.POLLERS_EMAIL,
                                       streams.POLLERS_MEDIA, streams.POLLERS_PUSH, streams.VOICE_ANSWERED_BY})
    for role in ROLES.values():
        for consumer in role.consumes:
            assert consumer.stream in names
        for stream, _durable in role.watches:
            assert stream in names


def test_only_owners_may_change_a_stream_and_everyone_has_a_private_inbox() -> None:
    for role in ROLES.values():
        perms = permissions(role)
        creates = {p.rsplit(".", 1)[1] for p in perms.publish if p.startswith("$JS.API.STREAM.CREATE.")}
        assert creates == set(role.owns) | {f"KV_{b}" for b in role.buckets}, role.name
        assert perms.subscribe[0] == f"{roles.inbox_prefix(role.name)}.>"
        assert not any(p == ">" or p.startswith(("_INBOX.", "$JS.API.>")) for p in (*perms.publish, *perms.subscribe))
        assert perms.allow_responses == bool(role.serves)


def test_the_compose_config_is_the_one_rendered_from_the_table() -> None:
    assert (ROOT / "deploy" / "nats.conf").read_text() == operator_config(), (
        "deploy/nats.conf drifted: regenerate it with `python -m delegate.launcher nats-config > deploy/nats.conf`"
    )


@pytest.mark.integration
def test_nats_config_prints_it() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "delegate.launcher", "nats-config", "--listen", "127.0.0.1:1", "--store-dir", "/x"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert out == operator_config(listen="127.0.0.1:1", store_dir="/x")


@pytest.mark.integration
def test_a_server_run_from_the_operator_config_takes_passwords_from_its_environment(tmp_path: Path) -> None:
    require_nats_binary()
    port, http = free_port(), free_port()
    conf = tmp_path / "nats.conf"
    conf.write_text(operator_config(listen=f"127.0.0.1:{port}", http=f"127.0.0.1:{http}", store_dir=str(tmp_path)))
    passwords = {role: f"pw-{role}" for role in ROLES}
    env = dict(os.environ, **{password_variable(role): pw for role, pw in passwords.items()})
    server = ManagedProcess("nats", [nats_server_binary(), "-c", str(conf)], env, tmp_path / "nats.log").start()
    try:
        assert server.proc is not None
        wait_for_port(port, 15, server.proc)

        async def check() -> None:
            nc = await nats.connect(f"nats://127.0.0.1:{port}", user="gateway", password="pw-gateway",
                                    inbox_prefix=roles.inbox_prefix("gateway"))
            await nc.close()
            with pytest.raises(nats.errors.Error, match="Authorization Violation"):
                await nats.connect(f"nats://127.0.0.1:{port}", allow_reconnect=False, connect_timeout=2)

        asyncio.run(check())
    finally:
        server.stop()

    # Without its variables the server does not start at all: no silent open door.
    bare = {k: v for k, v in os.environ.items() if not k.startswith("NATS_PASSWORD_")}
    failed = subprocess.run(
        [nats_server_binary(), "-c", str(conf)], env=bare, capture_output=True, text=True, timeout=30
    )
    assert failed.returncode != 0 and "NATS_PASSWORD_" in failed.stdout + failed.stderr


def test_each_child_of_the_launcher_gets_only_its_own_identity() -> None:
    base = {"LOG_LEVEL": "INFO", **{password_variable(role): f"pw-{role}" for role in ROLES}}
    for role in ROLES:
        env = service_env(role, base, None)  # an external server, one variable per service
        assert (env["NATS_USER"], env["NATS_PASSWORD"]) == (role, f"pw-{role}")
        assert not any(k.startswith("NATS_PASSWORD_") for k in env) and env["LOG_LEVEL"] == "INFO"
        private = service_env(role, base, {r: f"gen-{r}" for r in ROLES})  # make run's own server
        assert (private["NATS_USER"], private["NATS_PASSWORD"]) == (role, f"gen-{role}")
    assert "NATS_USER" not in service_env("gateway", {"LOG_LEVEL": "INFO"}, None)


def test_a_process_replies_on_its_roles_inbox_whatever_its_instance_is_called() -> None:
    creds = NatsCredentials(nats_user="gateway", nats_password="pw")
    options = connect_options("gateway-2", creds)
    assert options["inbox_prefix"] == "_INBOX_gateway" and options["user"] == "gateway"
    assert connect_options("agent:host:leader", NatsCredentials())["inbox_prefix"] == "_INBOX_agent"
    # a URL that carries the identity (the tests' role_url) wins, as it does in nats-py
    url = "nats://inner-plane:pw@127.0.0.1:4222"
    assert connect_options("inner-plane-test", NatsCredentials(), url=url)["inbox_prefix"] == "_INBOX_inner_plane"


def test_identities_are_generated_once_and_kept_private(tmp_path: Path) -> None:
    first = identities.load_or_create(tmp_path / "auth")
    assert set(first) == set(ROLES) and len(set(first.values())) == len(ROLES)
    assert identities.load_or_create(tmp_path / "auth") == first
    assert (tmp_path / "auth" / identities.FILE).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "auth").stat().st_mode & 0o777 == 0o700
