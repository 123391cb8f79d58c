"""Fan-out and history through the real ledger process: order, replay, lagging clients, gaps.

The ledger runs as a real process (``System``); the gateway app runs on a real uvicorn in this
process so its settings can be tuned. Where no agent exists, the test itself is the producer on
LEDGER_APPEND, exactly as the agent would be.

Expected seqs always come from the ledger itself: seqs are a commit order, not a dense count
(a redelivery after a NATS restart can leave holes), and the promise is "every committed event,
in seq order, once each".
"""

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.connection import Connection

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.gateway.fanout import Hub
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.system import System
from tests.support.waiting import eventually

from .helpers import (
    PATIENT_S,
    TOKEN,
    Gateway,
    StallingClient,
    auth,
    connect,
    gateway_context,
    gateway_settings,
    produce,
    recv_until,
    running_gateway,
    seqs,
    user_event,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def ledger(system: System) -> System:
    """nats-server and the ledger as real processes."""
    return system.start("ledger")


@pytest.fixture
async def bus(ledger: System) -> AsyncIterator[Bus]:
    assert ledger.nats is not None
    b = await Bus.connect(ledger.nats.url, "test-producer")
    await b.ensure_streams(all_owners=True)
    yield b
    await b.close()


def start_gateway(system: System, root: Path, **overrides: Any) -> AbstractAsyncContextManager[Gateway]:
    assert system.nats is not None
    return running_gateway(gateway_settings(role_url(system.nats, "gateway"), root / "gateway", **overrides))


async def committed(bus: Bus, count: int, page: int = 500) -> list[Event]:
    """Wait until the ledger has committed ``count`` events; return them all, by seq."""
    events: list[Event] = []

    async def enough() -> list[Event] | None:
        events.clear()
        while True:  # every page, not a wait
            after = events[-1].seq if events else 0
            reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after or 0, limit=page))
            events.extend(reply.events)
            if not reply.more:
                return events if len(events) >= count else None

    return await eventually(enough, f"the ledger to commit {count} events", explain=lambda: f"{len(events)} committed")


def stored_seqs(events: list[Event]) -> list[int]:
    """The seqs of events the ledger has committed (each has one)."""
    found: list[int] = []
    for event in events:
        assert event.seq is not None, event
        found.append(event.seq)
    return found


def through(seq: int) -> Any:
    return lambda f: f.get("type") == "event" and f["event"]["seq"] >= seq


async def hello(conn: Connection, after_seq: int) -> list[dict[str, Any]]:
    await conn.send(json.dumps({"type": "hello", "after_seq": after_seq}))
    return await recv_until(conn, lambda f: f["type"] == "ready")


async def test_timeline_pages_through_the_real_ledger(ledger: System, bus: Bus, tmp_path: Path) -> None:
    # No span: span expansion (covered by the ledger's own tests) would merge these pages.
    events = [user_event(f"note {i}", span_id=None) for i in range(23)]
    for event in events:
        await produce(bus, [event])
    await committed(bus, len(events))
    async with (
        start_gateway(ledger, tmp_path) as gw,
        httpx.AsyncClient(timeout=PATIENT_S, base_url=gw.http, headers=auth()) as c,
    ):
        first = await c.get("/api/timeline", params={"limit": 10})
        assert first.status_code == 200
        pages = [first.json()]
        while pages[-1]["cursor"] is not None:
            r = await c.get("/api/timeline", params={"limit": 10, "before": pages[-1]["cursor"]})
            assert r.status_code == 200
            pages.append(r.json())
        default = (await c.get("/api/timeline")).json()
    assert [len(p["events"]) for p in pages] == [10, 10, 3]
    ids = [e["id"] for p in reversed(pages) for e in p["events"]]
    assert ids == [e.id for e in events]  # oldest first, no gap, no duplicate across pages
    assert [e["id"] for e in default["events"]] == ids and default["cursor"] is None
    sample = pages[0]["events"][-1]
    assert set(sample) >= {"id", "ts", "seq", "conversation_id", "span_id", "kind", "channel", "role", "payload"}
    assert sample["ts"].endswith("Z") and sample["payload"]["text"] == "note 22"


async def test_two_clients_see_the_same_events_in_seq_order_once_each(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    await produce(bus, [user_event(f"before {i}") for i in range(5)])
    early = stored_seqs(await committed(bus, 5))
    async with start_gateway(ledger, tmp_path) as gw:
        a, b = await connect(gw.ws), await connect(gw.ws)
        async with a, b:
            assert seqs(await hello(a, 0)) == early
            assert seqs(await hello(b, early[1])) == early[2:]
            await produce(bus, [user_event(f"live {i}") for i in range(60)])
            every = stored_seqs(await committed(bus, 65))
            live_a = seqs(await recv_until(a, through(every[-1])))
            live_b = seqs(await recv_until(b, through(every[-1])))
    assert live_a == live_b == every[5:]


async def test_a_client_without_hello_still_gets_every_event_from_connect_on(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    async with start_gateway(ledger, tmp_path, gateway_hello_grace_s=0.2) as gw, await connect(gw.ws) as conn:
        await produce(bus, [user_event(f"m {i}") for i in range(10)])
        every = stored_seqs(await committed(bus, 10))
        frames = await recv_until(conn, through(every[-1]))
    assert seqs(frames) == every


async def test_a_reconnecting_client_catches_up_with_no_gap_and_no_duplicate(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    async with start_gateway(ledger, tmp_path) as gw:
        async with await connect(gw.ws) as conn:
            await hello(conn, 0)
            await produce(bus, [user_event(f"first {i}") for i in range(20)])
            first = stored_seqs(await committed(bus, 20))
            assert seqs(await recv_until(conn, through(first[-1]))) == first

        # While it is away, and while it reconnects, events keep being committed.
        await produce(bus, [user_event(f"away {i}") for i in range(200)])
        away = stored_seqs(await committed(bus, 220))  # committed before it comes back: replayed
        stop = asyncio.Event()

        async def keep_producing() -> int:
            n = 0
            while not stop.is_set():
                await produce(bus, [user_event(f"during {n}-{k}") for k in range(5)])
                n += 5
            return n

        producer = asyncio.create_task(keep_producing())
        async with await connect(gw.ws) as conn:
            replay = await hello(conn, first[-1])
            stop.set()
            every = stored_seqs(await committed(bus, 220 + await producer))
            rest = await recv_until(conn, through(every[-1]))
    got = seqs(replay) + seqs(rest)
    assert got == every[20:]  # no gap, no duplicate, across the replay/live seam
    assert seqs(replay)[: len(away) - 20] == away[20:]
    assert replay[-1]["last_seq"] == seqs(replay)[-1]


async def test_a_stalled_client_is_told_to_resync_while_another_keeps_receiving(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    async with start_gateway(ledger, tmp_path, gateway_ws_queue_limit=64, gateway_ws_lag_close_s=120) as gw:
        healthy = await connect(gw.ws)
        stalled = await StallingClient(f"{gw.ws}/chat?token={TOKEN}").open()
        try:
            async with healthy:
                await hello(healthy, 0)
                await stalled.send({"type": "hello", "after_seq": 0})
                big = "x" * 60_000
                # ~7 MB in all: beyond 64 queued frames plus what the sockets can buffer (~4 MB here).
                for round_ in range(12):
                    await produce(bus, [user_event(f"{round_}-{i} {big}") for i in range(10)])
                every = stored_seqs(await committed(bus, 120, page=10))
                assert seqs(await recv_until(healthy, through(every[-1]), timeout=60)) == every

                # What the stalled client was sent: a gapless prefix, then resync, then 4408.
                got = await stalled.drain()
                assert stalled.close_code == 4408
                assert got[-1] == {"type": "resync", "reason": "lagging"}
                prefix = seqs(got)
                assert prefix == every[: len(prefix)] and len(prefix) < len(every)

                # The healthy client is still live.
                await produce(bus, [user_event("after the stall")])
                last = (await committed(bus, 121, page=10))[-1].seq
                assert last is not None
                await recv_until(healthy, through(last))
        finally:
            stalled.close()


async def test_a_client_that_stalls_past_the_lag_deadline_still_reads_resync_and_4408(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    """It used to be cut without a close frame (1006) once GATEWAY_WS_LAG_CLOSE_S had passed."""
    async with start_gateway(ledger, tmp_path, gateway_ws_queue_limit=32, gateway_ws_lag_close_s=0.2) as gw:
        hub = gateway_context(gw).hub
        stalled = await StallingClient(f"{gw.ws}/chat?token={TOKEN}").open()
        try:
            await stalled.send({"type": "hello", "after_seq": 0})
            await eventually(lambda: len(hub.clients) == 1, "the client to attach")
            big = "x" * 60_000
            for round_ in range(12):  # ~7 MB: beyond 32 queued frames and what the sockets buffer
                await produce(bus, [user_event(f"{round_}-{i} {big}") for i in range(10)])
            # The marker: the lag deadline has passed and the gateway has given up on the client
            # (the old code cut the connection right there; now the hub merely lets it go).
            await eventually(lambda: not hub.clients, "the hub to let the stalled client go", 60)
            got = await stalled.drain()
            assert stalled.close_code == 4408
            assert got[-1] == {"type": "resync", "reason": "lagging"}
        finally:
            stalled.close()


async def test_the_hub_fills_a_gap_from_the_ledger_before_forwarding(ledger: System, bus: Bus) -> None:
    """A live event whose seq jumps ahead (the ones before it were lost) is preceded by the missing
    ones, read from the ledger by the shared ``LedgerFollower``; a late duplicate changes nothing."""
    announced: list[int | None] = []

    async def heard(event: Event) -> None:
        announced.append(event.seq)

    await bus.subscribe(topics.LEDGER_COMMITTED, heard)
    await produce(bus, [user_event(f"e {i}") for i in range(12)])
    events = await committed(bus, 12)
    # The ledger announces in the background, after a query already shows the commit: an
    # announcement reaching the hub after the rewind below would be forwarded live, not filled.
    # Heard here (in seq order, on the connection the hub subscribes on next), none is left.
    await eventually(lambda: events[-1].seq in announced, "the ledger to announce its 12 events")
    hub = Hub(queue_limit=100, tail_check_s=3600)  # no quiet-spell check during the test
    await hub.start(bus)  # its own live subscriptions are idle: nothing new is committed below
    await eventually(lambda: hub.last_seq == events[-1].seq, "the hub to start at the ledger's newest event")
    client = hub.attach()
    client.go_live()
    hub.last_seq = events[3].seq  # as if the next ones never reached this gateway
    # Through NATS, as the ledger announces them: the notifications of events[4:11] were lost.
    await bus.emit(topics.LEDGER_COMMITTED, events[11])
    await bus.emit(topics.LEDGER_COMMITTED, events[7])
    # The fill reads until the ledger has nothing newer: it must be over before the next commit,
    # or it reads that one too (filled 9, under load).
    await eventually(lambda: hub.last_seq == events[11].seq, "the hub to fill the gap")
    # One more, committed by the ledger after both: once it is out, the duplicate was handled.
    await produce(bus, [user_event("after the gap")])
    last = (await committed(bus, 13))[-1]
    await eventually(lambda: hub.last_seq == last.seq, "the hub to forward the next event")
    frames = []
    while client._frames:
        frame = await client.next_frame()
        assert frame is not None
        frames.append(json.loads(frame))
    assert seqs(frames) == [e.seq for e in events[4:]] + [last.seq]
    assert hub.filled == 8  # events[4:12] from the ledger: the gap and the event that showed it


async def test_clients_keep_a_gapless_stream_across_a_nats_restart(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    assert ledger.nats is not None
    async with start_gateway(ledger, tmp_path, gateway_tail_check_s=0.2) as gw, await connect(gw.ws) as conn:
        await hello(conn, 0)
        await produce(bus, [user_event(f"before {i}") for i in range(10)])
        first = stored_seqs(await committed(bus, 10))
        before = seqs(await recv_until(conn, through(first[-1])))
        ledger.nats.kill()
        ledger.nats.start()
        # Publishes retry until NATS is back; the ledger and the gateway reconnect on their own.
        await produce(bus, [user_event(f"after {i}") for i in range(10)])
        every = stored_seqs(await committed(bus, 20))
        after = seqs(await recv_until(conn, through(every[-1]), timeout=60))
    assert before + after == every


async def test_without_an_agent_the_socket_still_replays_and_goes_live(ledger: System, tmp_path: Path) -> None:
    """No agent runs: no state frame is invented, nothing waits for one."""
    async with start_gateway(ledger, tmp_path) as gw, await connect(gw.ws) as conn:
        frames = await hello(conn, 0)
    assert frames == [{"type": "ready", "last_seq": 0, "ledger_last_seq": 0}]


async def test_hello_after_live_events_is_refused_rather_than_replayed_out_of_order(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    await produce(bus, [user_event("before the connection")])
    await committed(bus, 1)
    async with start_gateway(ledger, tmp_path, gateway_hello_grace_s=0) as gw, await connect(gw.ws) as conn:
        await produce(bus, [user_event(f"m {i}") for i in range(3)])
        every = stored_seqs(await committed(bus, 4))
        assert seqs(await recv_until(conn, through(every[-1]))) == every[1:]  # live without hello
        await conn.send(json.dumps({"type": "hello", "after_seq": 0}))
        late = (await recv_until(conn, lambda f: f["type"] in ("error", "ready")))[-1]
        assert late["type"] == "error" and late["code"] == "hello_late"
        # A hello that asks for nothing older than what it already got is fine.
        assert await hello(conn, every[-1]) == [{"type": "ready", "last_seq": every[-1], "ledger_last_seq": every[-1]}]


async def test_a_client_ahead_of_the_ledger_still_gets_every_new_event(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    """A client remembering seqs this ledger never committed (its data was reset) is not starved."""
    await produce(bus, [user_event("only one")])
    first = stored_seqs(await committed(bus, 1))
    async with start_gateway(ledger, tmp_path) as gw, await connect(gw.ws) as conn:
        ready = (await hello(conn, 10_000))[-1]
        assert ready == {"type": "ready", "last_seq": first[-1], "ledger_last_seq": first[-1]}
        await produce(bus, [user_event("new")])
        every = stored_seqs(await committed(bus, 2))
        assert seqs(await recv_until(conn, through(every[-1]))) == every[1:]


async def test_a_client_that_stops_reading_is_closed_1011_by_the_keepalive_not_cut_with_1006(
    ledger: System, bus: Bus, tmp_path: Path
) -> None:
    """The probe (issue #32): a /chat client that stopped reading, and so answering pings, was cut
    after the keepalive (~40 s) and saw 1006, no close code. Reading again, it must find every
    frame it was sent, then a documented close code (1011: the keepalive failed)."""
    assert ledger.nats is not None
    settings = gateway_settings(role_url(ledger.nats, "gateway"), tmp_path / "gateway")
    # The first ping 5 s after connecting, unanswered after 2 more: the frames are sent before.
    async with running_gateway(settings, served={"ws_ping_interval": 5.0, "ws_ping_timeout": 2.0}) as gw:
        hub = gateway_context(gw).hub
        stalled = await StallingClient(f"{gw.ws}/chat?token={TOKEN}").open()
        try:
            await stalled.send({"type": "hello", "after_seq": 0})
            await eventually(lambda: len(hub.clients) == 1, "the client to attach")
            # From here on it reads nothing (so it answers no ping) while the timeline moves on:
            # ~1.2 MB, more than its socket buffers, fewer frames than would make it lag.
            big = "x" * 60_000
            await produce(bus, [user_event(f"{i} {big}") for i in range(20)])
            every = stored_seqs(await committed(bus, 20))
            await eventually(lambda: not hub.clients, "the gateway to end the silent client", 30)
            got = await stalled.drain()
            assert stalled.close_code == 1011
            assert seqs(got) == every
        finally:
            stalled.close()
