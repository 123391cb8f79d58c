"""Three nats-servers as a JetStream cluster (tests/support/cluster.py), and the system on it.

Replication comes from NATS_REPLICAS through the code every deployment runs: the streams
and KV buckets the services create have three copies, and the ledger takes a 10,000-event
burst during which a node (the LEDGER stream's leader) is SIGKILLed and restarted, and
commits every event exactly once.
"""

import asyncio
import functools
import sqlite3
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nats.js.errors
import pytest

from delegate.contracts import subjects, topics
from delegate.contracts.events import Event, Message, SpanOpened, make_event
from delegate.contracts.streams import STREAMS
from delegate.gateway.sign_in import SessionStore
from delegate.ledger.store import sqlite_path
from delegate.runtime.bus import Bus
from delegate.runtime.bus.connection import seeds
from delegate.runtime.credentials import NatsCredentials, connect_options
from delegate.runtime.lease import Lease
from tests.support.cluster import NatsCluster, wait_for_meta_leader
from tests.support.system import ARTIFACT_LOG_CHARS, ARTIFACTS, System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOTAL = 10_000


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    nodes = NatsCluster(tmp_path / "cluster").start()
    yield nodes
    nodes.stop()


@pytest.fixture
async def replicated(cluster: NatsCluster, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    """The test identity on the whole seed list, with NATS_REPLICAS=3 as a deployment sets it."""
    monkeypatch.setenv("NATS_REPLICAS", "3")
    bus = await Bus.connect(cluster.url, "test")
    yield bus
    await bus.close()


def test_the_seed_list_is_split_into_servers() -> None:
    assert seeds("nats://a:4222") == ["nats://a:4222"]
    assert seeds(" nats://a:4222, nats://b:4223 ,") == ["nats://a:4222", "nats://b:4223"]
    with pytest.raises(ValueError):
        seeds(" , ")


def test_a_login_in_the_url_is_also_the_login_on_the_nodes_the_cluster_announces() -> None:
    """The servers announce their peers without credentials: the URL's own must apply to them too."""
    options = connect_options("test", NatsCredentials(nats_user=None), url="nats://test:p%40ss@a:1,nats://test:p%40ss@b:2")
    assert (options["user"], options["password"]) == ("test", "p@ss")


async def test_a_connection_moves_to_a_node_it_was_never_given(cluster: NatsCluster) -> None:
    """One seed is enough: the cluster announces the others, and the bus fails over to them."""
    first = cluster.nodes[0]
    bus = await Bus.connect(first.url, "test-one-seed", replicas=3)
    try:
        await bus.ensure_streams(all_owners=True)
        assert bus.nc.connected_url is not None and bus.nc.connected_url.port == first.port
        await asyncio.to_thread(first.kill)
        ack = await bus.publish(topics.ledger_append("test"), _events(1)[0], deadline=30)
        assert bus.nc.connected_url is not None and bus.nc.connected_url.port != first.port
        assert ack.stream == "LEDGER" and (await bus.js.stream_info("LEDGER")).state.messages == 1
    finally:
        await bus.close()


async def test_a_stream_the_cluster_cannot_place_is_refused_for_that_reason(tmp_path: Path) -> None:
    """Two of three nodes elect a meta leader, but an R3 stream has no third peer: the error says so."""
    partial = NatsCluster(tmp_path / "partial")
    for node in partial.nodes[:2]:
        node.start()
    try:
        await asyncio.to_thread(wait_for_meta_leader, partial.url)
        bus = await Bus.connect(partial.url, "test", replicas=3)
        try:
            with pytest.raises(nats.js.errors.BadRequestError) as refused:
                await bus.ensure_streams(all_owners=True)
            assert refused.value.err_code == 10005, refused.value  # no suitable peers for placement
        finally:
            await bus.close()
    finally:
        partial.stop()


async def _replicas(bus: Bus, stream: str) -> tuple[int, int]:
    """(configured replicas, peers the cluster reports: the leader and its followers)."""
    info = await bus.js.stream_info(stream)
    assert info.cluster is not None and info.cluster.leader
    assert info.config.num_replicas is not None
    return info.config.num_replicas, 1 + len(info.cluster.replicas or [])


async def test_streams_and_kv_buckets_get_nats_replicas(replicated: Bus) -> None:
    assert replicated.replicas == 3  # from NATS_REPLICAS, not from anything cluster-specific
    await replicated.ensure_streams(all_owners=True)
    lease = Lease(replicated.js, "test-host", bucket=subjects.AGENT_LEASE_BUCKET, singleton="agent", ttl=5,
                  renew_every=1)
    assert await lease.try_acquire()
    await SessionStore("owner-token", ttl_s=3600).open(replicated)  # the gateway's sessions bucket
    buckets = [f"KV_{subjects.AGENT_LEASE_BUCKET}", f"KV_{subjects.GATEWAY_SESSIONS_BUCKET}"]
    for stream in [spec.name for spec in STREAMS] + buckets:
        assert await _replicas(replicated, stream) == (3, 3), stream


async def test_streams_and_buckets_made_with_one_copy_are_raised_to_three(cluster: NatsCluster,
                                                                          replicated: Bus) -> None:
    """What an earlier deployment created with NATS_REPLICAS=1 is updated in place, contents kept."""
    single = await Bus.connect(cluster.url, "test", replicas=1)
    try:
        await single.ensure_streams(all_owners=True)
        await single.publish(topics.ledger_append("test"), _events(1)[0])
        old = Lease(single.js, "old-host", bucket=subjects.VOICE_LEASE_BUCKET, singleton="voice", ttl=5,
                    renew_every=1, replicas=1)
        assert await old.try_acquire()
        assert await _replicas(single, "LEDGER") == (1, 1)
        assert await _replicas(single, f"KV_{subjects.VOICE_LEASE_BUCKET}") == (1, 1)
    finally:
        await single.close()

    await replicated.ensure_streams(all_owners=True)
    lease = Lease(replicated.js, "new-host", bucket=subjects.VOICE_LEASE_BUCKET, singleton="voice", ttl=5,
                  renew_every=1)
    assert not await lease.try_acquire()  # the bucket kept its entry: still the old holder's
    kv = await replicated.js.key_value(subjects.VOICE_LEASE_BUCKET)
    assert (await kv.get("leader")).value == old.value
    for stream in ("LEDGER", f"KV_{subjects.VOICE_LEASE_BUCKET}"):
        await eventually(functools.partial(_peers_current, replicated, stream), f"{stream} on three peers")
        assert (await _replicas(replicated, stream)) == (3, 3)
    assert (await replicated.js.stream_info("LEDGER")).state.messages == 1


async def _peers_current(bus: Bus, stream: str) -> bool:
    info = await bus.js.stream_info(stream)
    replicas = info.cluster.replicas if info.cluster else None
    return bool(replicas) and len(replicas or []) == 2 and all(r.current for r in replicas or [])


# ---- the system on the cluster ----------------------------------------------------------


def _events(n: int) -> list[Event]:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    out: list[Event] = []
    for i in range(n):
        span = f"span-{i // 50}"
        ts = t0 + timedelta(microseconds=i)
        if i % 50 == 0:
            out.append(make_event(SpanOpened(type="interaction"), conversation_id="c1", span_id=span,
                                  channel="text", ts=ts))
        else:
            out.append(make_event(Message(text=f"m{i}"), conversation_id="c1", span_id=span, channel="text",
                                  role="user", ts=ts))
    return out


def _db_counts(system: System) -> tuple[int, int]:
    """(events, distinct event ids) in the ledger's database; (0, 0) before it exists."""
    try:
        with sqlite3.connect(f"file:{sqlite_path(system.runtime)}?mode=ro", uri=True, timeout=5) as conn:
            row = conn.execute("SELECT COUNT(*), COUNT(DISTINCT id) FROM conversation_events").fetchone()
            return int(row[0]), int(row[1])
    except sqlite3.OperationalError:
        return 0, 0


async def test_a_burst_survives_losing_the_stream_leader(tmp_path: Path, cluster: NatsCluster) -> None:
    system = System(tmp_path, nats=cluster, env={"NATS_REPLICAS": "3", "LEDGER_ACK_WAIT_SECONDS": "2"},
                    separate=("ledger",))
    try:
        await asyncio.to_thread(system.start, "ledger")
        bus = await Bus.connect(cluster.url, "cluster-test", replicas=3)
        try:
            await _burst_with_a_node_lost(system, cluster, bus)
        finally:
            await bus.close()
    except BaseException:
        _keep_logs(system, cluster)
        raise
    finally:
        system.stop()


def _keep_logs(system: System, cluster: NatsCluster) -> None:
    """The services' and the nodes' logs, under test-output/logs/test_cluster, for a failed run."""
    out = ARTIFACTS / "test_cluster"
    out.mkdir(parents=True, exist_ok=True)
    nodes = "\n".join(
        f"===== nats {node.name}\n{node.proc.log_text()[-6000:] if node.proc else ''}" for node in cluster.nodes
    )
    (out / "services.log").write_text(system.dump_logs(ARTIFACT_LOG_CHARS) + "\n" + nodes)


async def _burst_with_a_node_lost(system: System, cluster: NatsCluster, bus: Bus) -> None:
    info = await bus.js.stream_info("LEDGER")
    assert info.config.num_replicas == 3 and info.cluster is not None
    leader = cluster.node(str(info.cluster.leader))

    events = _events(TOTAL)
    acked = 0
    gate = asyncio.Semaphore(500)

    async def one(event: Event) -> None:
        nonlocal acked
        async with gate:
            # Retried until acknowledged; a retry after a lost ack carries the same message
            # id, and JetStream's duplicate window keeps the event once.
            await bus.publish(topics.ledger_append("test"), event, deadline=60)
            acked += 1

    publishing = asyncio.gather(*(one(e) for e in events))
    try:
        await eventually(lambda: acked >= TOTAL // 4, "a quarter acknowledged")
        assert acked < TOTAL, "the burst ended before the node was lost"
        await asyncio.to_thread(leader.kill)
        lost_at = acked
        # The other two elect a new leader and the burst goes on without the dead node.
        await eventually(lambda: acked >= min(lost_at + TOTAL // 4, TOTAL), "publishing on two nodes", 60)
        during = await bus.js.stream_info("LEDGER")
        assert during.cluster is not None and during.cluster.leader not in (None, leader.name)
        await asyncio.to_thread(leader.start)
        await publishing
    finally:
        if not publishing.done():
            publishing.cancel()

    await eventually(lambda: _db_counts(system)[0] >= TOTAL, "every event committed", 60)
    assert _db_counts(system) == (TOTAL, TOTAL)
    stream = await bus.js.stream_info("LEDGER")
    assert stream.state.messages == TOTAL  # stored once each, retries included
    await eventually(lambda: _peers_current(bus, "LEDGER"), "the restarted node caught up", 30)
    assert system.procs["ledger"].alive()
