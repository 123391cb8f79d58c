"""Single node vs the R3 cluster (and PostgreSQL), side by side in one run; then a node lost.

    .venv/bin/python bench/cluster.py [--events 20000] [--turns 200] [--rate 500]

Three setups, each the real system (nats, the ledger, the agent, the gateway and the OpenAI
stand-in answering instantly, as processes, NATS authentication on, ``sync_interval:
always`` on every node):

  single / SQLite       one nats-server, the ledger on its SQLite file (the default)
  single / PostgreSQL   one nats-server, the ledger on a fresh PostgreSQL database
  R3 / SQLite           three nats-servers as one JetStream cluster, NATS_REPLICAS=3

For each it measures

  append rate        --events published in flight to the ledger's append subject (after a
                     warm-up) until the ledger has committed the last one; events/s
  first delta        a /chat message frame -> the first delta of that turn, --turns turns one
                     after another, each waiting for its answer (bench/chat.py's measurement)

The three systems run side by side and take turns, round by round (turns in up to four rounds,
appends in three, best of three reported), so load from elsewhere falls on all of them alike.
Next to them, floors measured in the same run: JetStream alone accepting the same events in flight
into a stream of its own with the same replicas (what the bus allows before the ledger), and
a bare WebSocket echo through uvicorn. On the cluster, last: while events are appended at a
steady --rate, the LEDGER stream's leader node is SIGKILLed; the time until publishes are
acknowledged again and until the ledger commits again, then the node restarted and the time
until its copy of the stream is current again.

Prints figures; asserts nothing. On a shared 2-core machine trust the ratios more than the
absolute rates.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nats.errors  # noqa: E402
import nats.js.errors  # noqa: E402
import websockets  # noqa: E402

from bench.chat import floor, hello, turns  # noqa: E402
from bench.ledger import committed_at, committed_at_pg, fresh_pg_database, sample_events  # noqa: E402
from bench.stats import ms, pct  # noqa: E402
from delegate.contracts import topics  # noqa: E402
from delegate.contracts.events import Event, Message, SpanOpened, make_event  # noqa: E402
from delegate.launcher.procs import NatsServer  # noqa: E402
from delegate.ledger.store import sqlite_path  # noqa: E402
from delegate.runtime.bus import MSG_ID, Bus  # noqa: E402
from tests.support.cluster import NatsCluster  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DATABASE = "bench_cluster_ledger"
WARMUP_TURNS = 20
RUNS = 3  # append runs per setup, each followed by a floor run: the best of each is reported
TEXT = "A sentence or two of ordinary conversation, about the length people type. " * 2


def line(label: str, value: str) -> None:
    print(f"  {label:<56} {value}")


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:6.2f} s"


@dataclass
class Recovery:
    """What losing the LEDGER stream's leader cost, each from the SIGKILL (seconds)."""

    rate: float  # the steady publish rate, events/s
    node: str
    on_killed_node: bool  # the bench's own connection was on the node killed
    new_leader: float | None = None
    acked_again: float | None = None  # first ack of a publish sent after the kill
    committed_again: float | None = None  # first commit of an event sent after the kill
    worst_ack: float = 0.0  # the longest send -> ack of any publish around the loss
    worst_commit: float = 0.0  # the longest send -> commit
    restarted: float = 0.0  # restart -> the node listening again
    caught_up: float | None = None  # restart -> both followers current, no lag
    published: int = 0
    committed: int = 0
    distinct: int = 0
    ledger_alive: bool = True


@dataclass
class Result:
    name: str
    appends: list[float]  # events/s through the ledger, per run
    floors: list[float]  # JetStream alone, same events in flight, events/s per run
    to_ack: list[float]
    to_delta: list[float]
    recovery: Recovery | None = None

    @property
    def append(self) -> float:
        return max(self.appends)  # best of the runs: load from elsewhere only ever slows one down

    @property
    def jetstream(self) -> float:
        return max(self.floors)


# ---- the database under the ledger ---------------------------------------------------------


class Database:
    """Where the ledger commits: its SQLite file, or the PostgreSQL database it was given."""

    def __init__(self, runtime: Path, url: str | None) -> None:
        self.path = sqlite_path(runtime)
        self.url = url

    def top(self) -> int:
        sql = "SELECT COALESCE(MAX(seq), 0) FROM conversation_events"
        if self.url is None:
            with contextlib.closing(sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)) as conn:
                return int(conn.execute(sql).fetchone()[0])
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
            return int(row[0]) if row else 0

    async def committed(self, total: int) -> float:
        """When MAX(seq) reaches ``total`` (perf_counter), polled as bench/ledger.py polls it."""
        if self.url is None:
            return (await committed_at(self.path, total))[1]
        return (await committed_at_pg(self.url, total))[1]


# ---- append rate ------------------------------------------------------------------------------


async def in_flight(bus: Bus, subject: str, events: list[Event]) -> float:
    """Publish every event with up to 4000 unacknowledged (nats-py's publish_async); returns the start."""
    start = time.perf_counter()
    for event in events:
        await bus.js.publish_async(subject, topics.LEDGER_APPEND_ANY.encode(event), headers={MSG_ID: event.id})
    await bus.js.publish_async_completed()
    return start


# ---- node loss ----------------------------------------------------------------------------------


async def leader_of(js: nats.js.JetStreamContext, stream: str) -> str | None:
    try:
        info = await js.stream_info(stream)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError):
        return None
    return info.cluster.leader if info.cluster else None


async def caught_up(js: nats.js.JetStreamContext, stream: str) -> bool:
    try:
        info = await js.stream_info(stream)
    except (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.APIError):
        return False
    replicas = (info.cluster.replicas if info.cluster else None) or []
    return len(replicas) == 2 and all(r.current and not r.offline and not r.lag for r in replicas)


class Commits:
    """The ledger's SQLite file polled for newly committed event ids: id -> when first seen."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        self.after = int(self.conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0])
        self.seen: dict[str, float] = {}

    def poll(self) -> None:
        rows = self.conn.execute("SELECT seq, id FROM conversation_events WHERE seq > ? ORDER BY seq",
                                 (self.after,)).fetchall()
        now = time.perf_counter()
        for seq, ident in rows:
            self.seen.setdefault(ident, now)
            self.after = seq

    def counts(self, ids: list[str]) -> tuple[int, int]:
        """(rows, distinct ids) among ``ids``: each committed once means both equal len(ids)."""
        total = distinct = 0
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            marks = ",".join("?" * len(chunk))
            row = self.conn.execute(
                f"SELECT COUNT(*), COUNT(DISTINCT id) FROM conversation_events WHERE id IN ({marks})", chunk
            ).fetchone()
            total, distinct = total + int(row[0]), distinct + int(row[1])
        return total, distinct


def steady_event(i: int) -> Event:
    """Event ``i`` of an endless run shaped like bench/ledger.py's sample: spans of 20."""
    span = f"steady-{i // 20}"
    if i % 20 == 0:
        return make_event(SpanOpened(type="interaction"), conversation_id="bench", span_id=span, channel="text")
    return make_event(Message(text=TEXT), conversation_id="bench", span_id=span, channel="text",
                      role="user" if i % 2 else "assistant")


@contextlib.asynccontextmanager
async def steady(bus: Bus, rate: float) -> AsyncIterator[dict[str, tuple[float, float]]]:
    """Publish events at ``rate``/s (bench/ledger.py's mix, made as they are sent), each retried
    until acknowledged (Bus.publish, as services publish); yields id -> (sent, acked), filled in
    as acks arrive. On exit, stops sending and waits for every publish sent."""
    done: dict[str, tuple[float, float]] = {}
    tasks: set[asyncio.Task[None]] = set()
    stop = asyncio.Event()

    async def one(event: Event, sent: float) -> None:
        await bus.publish(topics.ledger_append("test"), event, deadline=120)
        done[event.id] = (sent, time.perf_counter())

    async def pace() -> None:
        start = time.perf_counter()
        i = 0
        while not stop.is_set():
            if (wait := start + i / rate - time.perf_counter()) > 0:
                await asyncio.sleep(wait)
            event = steady_event(i)
            i += 1
            task = asyncio.create_task(one(event, time.perf_counter()))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    pacer = asyncio.create_task(pace())
    try:
        yield done
    finally:
        stop.set()
        await pacer
        await asyncio.gather(*tasks)


async def lose_a_node(system: System, cluster: NatsCluster, bus: Bus, rate: float) -> Recovery:
    probe = bus.nc.jetstream(timeout=0.5)
    leader = await leader_of(probe, "LEDGER")
    node = cluster.node(str(leader))
    connected = bus.nc.connected_url
    recovery = Recovery(rate=rate, node=node.name, on_killed_node=connected is not None and connected.port == node.port)
    commits = Commits(sqlite_path(system.runtime))

    async def watch(until: float) -> None:
        while time.perf_counter() < until:
            commits.poll()
            await asyncio.sleep(0.005)

    async with steady(bus, rate) as acks:
        await watch(time.perf_counter() + 3.0)  # steady state before the loss
        killed = time.perf_counter()
        await asyncio.to_thread(node.kill)
        deadline = killed + 90
        while time.perf_counter() < deadline:
            commits.poll()
            if recovery.new_leader is None and await leader_of(probe, "LEDGER") not in (None, node.name):
                recovery.new_leader = time.perf_counter() - killed
            after = [acked for sent, acked in acks.values() if sent >= killed]
            if after and recovery.acked_again is None:
                recovery.acked_again = min(after) - killed
            sent_after = {ident for ident, (sent, _) in acks.items() if sent >= killed}
            firsts = [at for ident, at in commits.seen.items() if ident in sent_after]
            if firsts and recovery.committed_again is None:
                recovery.committed_again = min(firsts) - killed
            if None not in (recovery.new_leader, recovery.acked_again, recovery.committed_again):
                break
            await asyncio.sleep(0.01)
        await watch(time.perf_counter() + 2.0)  # on two nodes for a while
        restart = time.perf_counter()
        await asyncio.to_thread(node.start)
        recovery.restarted = time.perf_counter() - restart
        deadline = restart + 120
        while time.perf_counter() < deadline:
            commits.poll()
            if await caught_up(probe, "LEDGER"):
                recovery.caught_up = time.perf_counter() - restart
                break
            await asyncio.sleep(0.05)
        await watch(time.perf_counter() + 1.0)
    published = list(acks)
    deadline = time.perf_counter() + 120
    while time.perf_counter() < deadline and not all(ident in commits.seen for ident in published):
        commits.poll()
        await asyncio.sleep(0.02)
    window = [(sent, acked, commits.seen.get(ident)) for ident, (sent, acked) in acks.items()]
    recovery.worst_ack = max(acked - sent for sent, acked, _ in window)
    recovery.worst_commit = max((at - sent for sent, _, at in window if at is not None), default=0.0)
    recovery.published = len(published)
    recovery.committed, recovery.distinct = commits.counts(published)
    commits.conn.close()
    return recovery


# ---- the setups, side by side -----------------------------------------------------------------


class Setup:
    """One whole system on its own NATS (a server or the cluster), started and kept running so the
    measurements can take turns between setups: load from elsewhere then falls on all of them."""

    def __init__(self, name: str, root: Path, *, cluster: bool = False, database_url: str | None = None) -> None:
        self.name = name
        self.standin = StandinProcess(log_dir=root / "standin")
        self.nats: NatsServer | NatsCluster = (
            NatsCluster(root / "nats", auth=True) if cluster else nats_server(root / "nats", auth=True)
        )
        env = {
            "OPENAI_API_KEY": TEST_API_KEY,
            "OPENAI_BASE_URL": "",  # the stand-in's, once it has started
            "LOG_LEVEL": "WARNING",
            "COMPACT_THRESHOLD": "10000000",  # the chat path, not compaction
            "IDLE_SPAN_SECONDS": "100000",
            "NATS_REPLICAS": "3" if cluster else "1",
            **({"DATABASE_URL": database_url} if database_url else {}),
        }
        self.system = System(root / "system", env=env, nats=self.nats)
        self.db = Database(self.system.runtime, database_url)
        self.bus: Bus | None = None
        self.conn: websockets.ClientConnection | None = None
        self.result = Result(name, [], [], [], [])
        self.closed = False

    async def start(self) -> None:
        print(f"  {self.name}", flush=True)
        self.standin.start()
        self.system.extra_env["OPENAI_BASE_URL"] = self.standin.base_url
        self.nats.start()
        await asyncio.to_thread(lambda: self.system.start("ledger", "agent", "gateway", separate=True))
        self.bus = await Bus.connect(self.nats.url, "bench", replicas=3 if self.clustered else 1)
        self.conn = await websockets.connect(f"{self.system.ws}/chat?token={self.system.token}", max_size=None)
        await hello(self.conn, 0)

    @property
    def clustered(self) -> bool:
        return isinstance(self.nats, NatsCluster)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.conn is not None:
            await self.conn.close()
        if self.bus is not None:
            await self.bus.close()
        await asyncio.to_thread(self.system.stop)
        await asyncio.to_thread(self.standin.stop)

    async def turns(self, n: int, tag: str) -> None:
        """bench/chat.py's turns: message frame -> ack, -> first delta."""
        assert self.conn is not None
        measured = await turns(self.conn, n, tag)
        self.result.to_ack += [t.acked - t.sent for t in measured]
        self.result.to_delta += [t.delta - t.sent for t in measured]


async def run(args: argparse.Namespace) -> None:
    print(f"{args.events:,} events appended x {RUNS} and {args.turns} turns per setup, the setups taking turns; "
          "NATS authentication on, sync_interval always")
    async with contextlib.AsyncExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-cluster-",
                                                                    ignore_cleanup_errors=True)))
        frame = json.dumps({"type": "message", "text": "turn 0: say something", "client_msg_id": "x-0"})
        echo = await floor(args.turns, frame)
        stack.enter_context(fresh_pg_database(args.postgres, PG_DATABASE))
        # the ledger takes a postgresql:// URL (fresh_pg_database yields key=value conninfo)
        pg_url = urlunsplit(urlsplit(args.postgres)._replace(path=f"/{PG_DATABASE}"))
        setups = [
            Setup("single node / SQLite", root / "single-sqlite"),
            Setup("single node / PostgreSQL", root / "single-pg", database_url=pg_url),
            Setup("R3 cluster / SQLite", root / "r3-sqlite", cluster=True),
        ]
        print("starting")
        for setup in setups:
            stack.push_async_callback(setup.close)
            await setup.start()

        rounds = max(1, min(4, args.turns // 25))
        print(f"first delta: {args.turns} turns per setup after {WARMUP_TURNS} to warm up, in {rounds} rounds",
              flush=True)
        for setup in setups:
            await setup.turns(WARMUP_TURNS, "warmup")
        for r in range(rounds):
            for setup in setups:
                await setup.turns(args.turns // rounds + (r < args.turns % rounds), f"turn-{r}")

        print(f"append: {args.events:,} events in flight through the ledger, then the floor (JetStream "
              f"alone), {RUNS} rounds", flush=True)
        floors = {setup.name: await floor_stream(setup) for setup in setups}
        for setup in setups:  # warm-up, once
            await append_once(setup, min(2000, max(args.events // 10, 1)))
            await floor_once(setup, floors[setup.name], min(2000, args.events))
        for _ in range(RUNS):
            for setup in setups:
                setup.result.appends.append(await append_once(setup, args.events))
                setup.result.floors.append(await floor_once(setup, floors[setup.name], args.events))

        cluster = setups[-1]
        for setup in setups[:-1]:  # the node loss on the cluster alone
            await setup.close()
        assert cluster.bus is not None and isinstance(cluster.nats, NatsCluster)
        print(f"node loss: the LEDGER leader SIGKILLed while appending {args.rate:,.0f} events/s", flush=True)
        recovery = await lose_a_node(cluster.system, cluster.nats, cluster.bus, args.rate)
        recovery.ledger_alive = cluster.system.procs["ledger"].alive()
        cluster.result.recovery = recovery
    report([setup.result for setup in setups], echo)


async def floor_stream(setup: Setup) -> str:
    """A copy of the LEDGER stream's configuration (replicas included) that nobody reads."""
    assert setup.bus is not None
    js = setup.bus.js
    await js.add_stream(replace((await js.stream_info("LEDGER")).config, name="BENCH_FLOOR",
                                subjects=["bench.floor.>"]))
    while await leader_of(js, "BENCH_FLOOR") is None:
        await asyncio.sleep(0.05)
    return "bench.floor.append"


async def floor_once(setup: Setup, subject: str, n: int) -> float:
    """JetStream alone: ``n`` events in flight until all are acknowledged; events/s."""
    assert setup.bus is not None
    start = await in_flight(setup.bus, subject, sample_events(n))
    return n / (time.perf_counter() - start)


async def append_once(setup: Setup, n: int) -> float:
    """``n`` events published in flight until the ledger has committed the last; events/s."""
    assert setup.bus is not None
    events = sample_events(n)
    base = await asyncio.to_thread(setup.db.top)
    start = await in_flight(setup.bus, topics.ledger_append("test").subject, events)
    return n / (await setup.db.committed(base + n) - start)


# ---- the report ----------------------------------------------------------------------------------


def report(results: list[Result], echo: list[float]) -> None:
    base = results[0]
    print("\nper setup")
    for r in results:
        print(f"  {r.name}")
        line("    append through the ledger", f"{r.append:9,.0f} events/s")
        line("      (best of " + " / ".join(f"{x:,.0f}" for x in r.appends) + ")", "")
        line("    floor: JetStream alone, same events in flight", f"{r.jetstream:9,.0f} events/s")
        line("      (best of " + " / ".join(f"{x:,.0f}" for x in r.floors) + ")", "")
        line("    the ledger's share of the bus's own rate", f"{r.append / r.jetstream:9.0%}")
        line("    message -> ack        p50 / p99", f"{ms(pct(r.to_ack, 50))} / {ms(pct(r.to_ack, 99))}")
        line("    message -> 1st delta  p50 / p99", f"{ms(pct(r.to_delta, 50))} / {ms(pct(r.to_delta, 99))}")
    line("floor: bare WebSocket echo  p50 / p99", f"{ms(pct(echo, 50))} / {ms(pct(echo, 99))}")

    for r in results:
        if (rec := r.recovery) is None:
            continue
        print(f"\nnode loss ({r.name}): {rec.node}, the LEDGER leader, SIGKILLed at {rec.rate:,.0f} events/s "
              f"(the bench's connection {'on' if rec.on_killed_node else 'not on'} it)")
        line("kill -> a new LEDGER leader (stream info)", seconds(rec.new_leader))
        line("kill -> publishes acknowledged again", seconds(rec.acked_again))
        line("kill -> the ledger commits again (the gap)", seconds(rec.committed_again))
        line("longest publish -> ack around the loss", seconds(rec.worst_ack))
        line("longest publish -> commit around the loss", seconds(rec.worst_commit))
        line("restart -> the node listening", seconds(rec.restarted))
        line("restart -> its copy current again (caught up)", seconds(rec.caught_up))
        once = rec.committed == rec.distinct == rec.published
        line("the ledger process alive throughout", str(rec.ledger_alive))
        line(f"{rec.published:,} published during it: committed once each", f"{once} ({rec.committed:,} rows, "
             f"{rec.distinct:,} ids)")

    print()
    head = f"  {'setup':<26}{'append ev/s':>12}{'vs single/SQLite':>18}{'1st delta p50 / p99':>26}   recovery"
    print(head)
    print("  " + "-" * (len(head) + 24))
    for r in results:
        rec = r.recovery
        recovery = "—" if rec is None else (
            f"acks {seconds(rec.acked_again).strip()}, commits {seconds(rec.committed_again).strip()}, "
            f"caught up {seconds(rec.caught_up).strip()}")
        delta = f"{ms(pct(r.to_delta, 50)).strip()} / {ms(pct(r.to_delta, 99)).strip()}"
        print(f"  {r.name:<26}{r.append:>12,.0f}{r.append / base.append:>18.2f}{delta:>26}   {recovery}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20000, help="events appended per setup (after a warm-up)")
    parser.add_argument("--turns", type=int, default=200, help="chat turns per setup (after a warm-up)")
    parser.add_argument("--rate", type=float, default=500, help="events/s appended while a node is lost")
    parser.add_argument("--postgres", default=PG_ADMIN, help="admin URL of the PostgreSQL server (trust auth)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # A killed node and readiness probes make the bus log disconnects: noise here.
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    logging.getLogger("nats").setLevel(logging.CRITICAL)
    os.environ.pop("DATABASE_URL", None)  # SQLite unless a setup asks for PostgreSQL
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
