"""Deployment at scale: how many chat watchers one gateway carries, and two gateways side by side.

    .venv/bin/python bench/scale.py [--watchers 10,100,500] [--events 1000] [--rounds 1] [--timeout 600]

Starts nats-server (NATS authentication on), the ledger and two gateway processes
(``python -m delegate.gateway``, the second with its own DELEGATE_PORT); no agent. For each
number of watchers N in --watchers, three setups take turns, round by round (--rounds; the best
round of each setup, by elapsed time, is reported), each receiving the same --events E ledger
events published by this script as a producer (to the ledger's append subject, in flight 500 at
a time, as bench/chat.py's fan-out does):

  floor         N plain NATS core subscribers of ``ledger.live.committed`` (the subject the
                gateway's hub receives committed events on), each on a NATS connection of its
                own: the ledger's commit and NATS's own fan-out, no gateway
  one gateway   N /chat WebSocket watchers on the first gateway, each having said ``hello`` with
                after_seq = the ledger's last seq (live from there, no history replay)
  two gateways  the same N watchers split round-robin across the two gateway processes

and prints, for each: the time from the first publish until every receiver has all E events
(checked: in seq order, once each, the same events everywhere), events/s per receiver, event
frames/s in all (N x E / that time), and the latency from publish to arrival at a receiver
(p50/p99 over every event at every receiver; each event's publish time is stamped by its id).
The events go out as a burst, so the latency is mostly queueing behind the events published
before (its p50 is near half the elapsed time): it says how far behind a watcher is at that load,
not what one event alone costs (bench/chat.py measures that path).
Ratios: the one-gateway figures against the floor of the same run; two gateways against one.
Two gateways really serving is counted twice: the watchers opened on each gateway (and the
event frames each delivered), and the connections each gateway's own log says it attached.
CPU: the share of a core each process used during the round (Linux /proc): the receivers all
run in this one process, so where it nears 100% the client, not the gateway, sets the pace.

A watcher told ``resync`` (its outbox passed GATEWAY_WS_QUEUE_LIMIT: it fell behind) does what a
real client does: it reconnects to the same gateway with ``hello`` from its last seq; those are
counted and printed. Both gateways run through every setup (the idle one still receives every
committed event), so all three setups carry the same processes.

Last, one line on concurrent calls, which are 1 by design (not measured here).

Prints figures; asserts nothing. On a shared 2-core machine trust the ratios more than the
absolute rates; two gateways cannot use more cores than the machine has left over from
nats-server, the ledger and this process.
"""

import argparse
import asyncio
import json
import logging
import os
import re
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import nats  # noqa: E402
import websockets  # noqa: E402

from bench.chat import until  # noqa: E402
from bench.stats import cpu_seconds, ms, pct  # noqa: E402
from delegate.contracts import subjects, topics  # noqa: E402
from delegate.contracts.events import Message, make_event  # noqa: E402
from delegate.contracts.messages import QueryRequest  # noqa: E402
from delegate.launcher.procs import NatsServer, free_port  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.system import System  # noqa: E402

GATEWAYS = ("gateway", "gateway-2")
IN_FLIGHT = 500  # publishes awaited together, as bench/chat.py's fan-out
CONNECT_AT_ONCE = 50  # watchers (or floor connections) opened together
# The gateway's INFO line for each /chat connection its hub attached (chat_ws.ChatConnection.run).
ATTACHED = re.compile(r"chat #\d+ \S+ connected")
CONCURRENT_CALLS = (
    "concurrent calls: 1 by design, not measured. The voice service holds one call at a "
    "time, system-wide: services/voice/src/delegate/voice/manager.py, Calls.prepare answers "
    'PrepareReply(ok=False, reason="busy", message="another voice or phone call is live") while it '
    "has a call or cannot take the voice lock (voice/lock.py: a fenced lease, singleton \"voice\" in "
    "VOICE_LEASE_BUCKET, so a second voice process refuses too); the gateway then rejects the Twilio call "
    'as busy (gateway/twilio_voice.py: response.reject(reason="busy")) and closes a browser call with '
    "4409 (gateway/browser_call_ws.py: CLOSE_BUSY). More gateways do not add calls."
)


# ---- bookkeeping shared by every kind of receiver -------------------------------------------


class Round:
    """One setup's round: the events published, when each was published, who has them all."""

    def __init__(self, events: int) -> None:
        self.events = events
        self.sent: dict[str, float] = {}  # event id -> perf_counter just before its publish
        self.complete = 0  # receivers holding all of them


class Tally:
    """One receiver's view of the round: its events in seq order, once each, and when each arrived."""

    def __init__(self, round_: Round, after_seq: int) -> None:
        self.round = round_
        self.last_seq = after_seq
        self.got = 0  # this round's events received
        self.seq_sum = 0  # of those events: the same sum everywhere = the same events everywhere
        self.disordered = 0  # event frames at or below a seq already seen (duplicates, reordering)
        self.latencies: list[float] = []

    def event(self, event: dict[str, Any], now: float) -> None:
        seq = int(event["seq"])
        if seq <= self.last_seq:
            self.disordered += 1
        else:
            self.last_seq = seq
        sent = self.round.sent.get(event["id"])
        if sent is None:
            return  # not one of this round's (nothing else writes to this ledger, though)
        self.got += 1
        self.seq_sum += seq
        self.latencies.append(now - sent)
        if self.got == self.round.events:
            self.round.complete += 1


class Watcher:
    """A /chat client that says hello and reads everything; told to resync, it reconnects from its last seq."""

    def __init__(self, url: str, gateway: str, tally: Tally) -> None:
        self.url = url
        self.gateway = gateway
        self.tally = tally
        self.ready = asyncio.Event()
        self.frames = 0
        self.resyncs = 0
        self.connections = 0
        self.errors: list[str] = []
        self._conn: websockets.ClientConnection | None = None
        self._stopping = False
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while not self._stopping:
            async with websockets.connect(self.url, max_size=None) as conn:
                self._conn = conn
                self.connections += 1
                await conn.send(json.dumps({"type": "hello", "after_seq": self.tally.last_seq}))
                try:
                    async for raw in conn:
                        now = time.perf_counter()
                        self.frames += 1
                        frame = json.loads(raw)
                        kind = frame["type"]
                        if kind == "event":
                            self.tally.event(frame["event"], now)
                        elif kind == "ready":
                            self.ready.set()
                        elif kind == "resync":
                            self.resyncs += 1
                        elif kind == "error":
                            self.errors.append(f"{frame.get('code')}: {frame.get('message')}")
                except websockets.ConnectionClosed:
                    pass

    async def close(self) -> None:
        self._stopping = True
        if self._conn is not None:
            await self._conn.close()
        await asyncio.gather(self.task, return_exceptions=True)


class FloorSubscriber:
    """A plain NATS core subscriber of the committed-event subject, on a connection of its own."""

    def __init__(self, tally: Tally) -> None:
        self.tally = tally
        self.nc: Any = None

    async def open(self, url: str, name: str) -> None:
        self.nc = await nats.connect(url, name=name)

        async def on_msg(msg: Any) -> None:
            now = time.perf_counter()
            self.tally.event(json.loads(msg.data), now)

        await self.nc.subscribe(subjects.LEDGER_COMMITTED, cb=on_msg)
        await self.nc.flush()  # the server has the subscription before anything is published

    async def close(self) -> None:
        await self.nc.close()


# ---- CPU (Linux /proc, as bench/voice.py and bench/footprint.py read it) ---------------------


def children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


# ---- one round -------------------------------------------------------------------------------


@dataclass
class Result:
    setup: str
    receivers: int
    events: int
    elapsed: float  # first publish -> every receiver has every event
    published: float  # first publish -> the last PubAck
    latencies: list[float]  # publish -> arrival, every event at every receiver, sorted
    ordered: bool
    same: bool
    resyncs: int = 0
    errors: list[str] = field(default_factory=list)
    watchers_on: dict[str, int] = field(default_factory=dict)  # gateway -> watchers opened there
    frames_on: dict[str, int] = field(default_factory=dict)  # gateway -> frames it delivered
    attached_on: dict[str, int] = field(default_factory=dict)  # gateway -> connections its log attached
    cpu: dict[str, float] = field(default_factory=dict)  # process -> share of a core

    @property
    def per_receiver(self) -> float:
        return self.events / self.elapsed

    @property
    def frames_per_s(self) -> float:
        return self.receivers * self.events / self.elapsed


class Bench:
    def __init__(self, system: System, bus: Bus, events: int, timeout: float) -> None:
        self.system = system
        self.bus = bus
        self.events = events
        self.timeout = timeout
        self.urls = {g: system.http_of(g).replace("http://", "ws://") + f"/chat?token={system.token}" for g in GATEWAYS}
        assert isinstance(system.nats, NatsServer) and system.nats.proc is not None
        self.pids: dict[str, list[int]] = {
            "bench (all receivers)": [os.getpid()],
            "nats-server": [system.nats.proc.pid],
            "ledger": [system.procs["ledger"].pid, *children(system.procs["ledger"].pid)],
            **{g: [system.procs[g].pid] for g in GATEWAYS},
        }

    async def last_seq(self) -> int:
        return (await self.bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=1))).last_seq

    def attached(self, gateway: str) -> int:
        return len(ATTACHED.findall(self.system.procs[gateway].log_text()))

    async def publish(self, round_: Round) -> tuple[float, float]:
        """Every event of the round, IN_FLIGHT at a time; (first publish, last PubAck)."""
        events = [
            make_event(Message(text=f"scale {i}"), conversation_id=None, span_id=None, channel="text", role="user")
            for i in range(round_.events)
        ]
        subject = topics.ledger_append("test")

        async def one(event: Any) -> None:
            round_.sent[event.id] = time.perf_counter()
            await self.bus.publish(subject, event)

        t0 = time.perf_counter()
        for start in range(0, len(events), IN_FLIGHT):
            await asyncio.gather(*(one(e) for e in events[start:start + IN_FLIGHT]))
        return t0, time.perf_counter()

    async def measure(
        self, setup: str, round_: Round, tallies: list[Tally], describe: Callable[[], str]
    ) -> Result:
        """Publish, wait until every receiver has every event, and sum up."""
        cpu_before = {name: cpu_seconds(pids) for name, pids in self.pids.items()}
        t0, acked = await self.publish(round_)
        try:
            done = await until(lambda: round_.complete == len(tallies), self.timeout, setup)
        except TimeoutError:
            print(f"  {setup}: only {round_.complete} of {len(tallies)} receivers had all {round_.events} "
                  f"events after {self.timeout:.0f} s; fewest held: {min(t.got for t in tallies)}; {describe()}")
            raise
        elapsed = done - t0
        cpu = {name: (cpu_seconds(pids) - cpu_before[name]) / elapsed for name, pids in self.pids.items()}
        latencies = sorted(x for t in tallies for x in t.latencies)
        return Result(
            setup=setup,
            receivers=len(tallies),
            events=round_.events,
            elapsed=elapsed,
            published=acked - t0,
            latencies=latencies,
            ordered=all(t.disordered == 0 and t.got == round_.events for t in tallies),
            same=len({t.seq_sum for t in tallies}) == 1,
            cpu=cpu,
        )

    async def floor(self, n: int) -> Result:
        assert self.system.nats is not None
        round_ = Round(self.events)
        base = await self.last_seq()
        subs = [FloorSubscriber(Tally(round_, base)) for _ in range(n)]
        for start in range(0, n, CONNECT_AT_ONCE):
            await asyncio.gather(*(s.open(self.system.nats.url, f"bench-floor-{start + i}")
                                   for i, s in enumerate(subs[start:start + CONNECT_AT_ONCE])))
        try:
            return await self.measure("floor", round_, [s.tally for s in subs], lambda: "")
        finally:
            await asyncio.gather(*(s.close() for s in subs), return_exceptions=True)

    async def gateways(self, n: int, gateways: tuple[str, ...]) -> Result:
        round_ = Round(self.events)
        base = await self.last_seq()
        attached_before = {g: self.attached(g) for g in GATEWAYS}
        watchers: list[Watcher] = []
        for start in range(0, n, CONNECT_AT_ONCE):
            batch = [
                Watcher(self.urls[gateways[i % len(gateways)]], gateways[i % len(gateways)], Tally(round_, base))
                for i in range(start, min(n, start + CONNECT_AT_ONCE))
            ]
            watchers += batch
            await first_of(asyncio.gather(*(w.ready.wait() for w in batch)), [w.task for w in batch], self.timeout)

        def describe() -> str:
            resyncs = sum(w.resyncs for w in watchers)
            errors = sorted({e for w in watchers for e in w.errors})
            return f"resyncs {resyncs}, errors {errors or 'none'}"

        setup = "one gateway" if len(gateways) == 1 else f"{len(gateways)} gateways"
        try:
            result = await self.measure(setup, round_, [w.tally for w in watchers], describe)
        finally:
            await asyncio.gather(*(w.close() for w in watchers), return_exceptions=True)
        result.resyncs = sum(w.resyncs for w in watchers)
        result.errors = sorted({e for w in watchers for e in w.errors})
        for g in GATEWAYS:
            mine = [w for w in watchers if w.gateway == g]
            result.watchers_on[g] = len(mine)
            result.frames_on[g] = sum(w.frames for w in mine)
        # Each connection (reconnects too) is one INFO line in its gateway's log, written as it is attached.
        expected = {g: sum(w.connections for w in watchers if w.gateway == g) for g in GATEWAYS}
        try:
            await until(lambda: all(self.attached(g) - attached_before[g] >= expected[g] for g in GATEWAYS), 5,
                        "gateway logs")
        except TimeoutError:
            pass  # printed as found
        result.attached_on = {g: self.attached(g) - attached_before[g] for g in GATEWAYS}
        return result


async def first_of(wanted: Awaitable[Any], tasks: list[asyncio.Task[None]], timeout: float) -> None:
    """``wanted``, unless one of ``tasks`` (a watcher that could not connect) fails first."""
    waiter = asyncio.ensure_future(wanted)
    done, _ = await asyncio.wait([waiter, *tasks], timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    if waiter in done:
        return
    waiter.cancel()
    for task in done:
        task.result()  # raises what stopped the watcher
    raise TimeoutError("watchers not ready")


# ---- the run ---------------------------------------------------------------------------------


def figures(result: Result, floor: Result | None = None, label: str = "") -> str:
    p50, p99 = pct(result.latencies, 50), pct(result.latencies, 99)
    text = (f"  {result.setup:<13}{result.elapsed:8.2f} s{result.per_receiver:10.0f}/s{result.frames_per_s:12.0f}/s"
            f"{ms(p50)}{ms(p99)}")
    if floor is not None:
        f50, f99 = pct(floor.latencies, 50), pct(floor.latencies, 99)
        text += (f"   {label}: frames/s {result.frames_per_s / floor.frames_per_s:5.2f}x, "
                 f"latency {p50 / f50:5.2f}x / {p99 / f99:5.2f}x")
    return text


def details(result: Result) -> None:
    cpu = ", ".join(f"{name} {share * 100:.0f}%" for name, share in result.cpu.items())
    print(f"    {result.setup}: in seq order, once each: {result.ordered}; the same events everywhere: "
          f"{result.same}; producer's last PubAck after {result.published:.2f} s")
    if result.watchers_on:
        on = "; ".join(
            f"{g}: {result.watchers_on[g]} watchers, {result.frames_on[g]} frames, "
            f"{result.attached_on[g]} connections in its log"
            for g in GATEWAYS
        )
        print(f"      {on}")
        print(f"      resyncs (reconnected with hello from the last seq): {result.resyncs}; "
              f"error frames: {result.errors or 'none'}")
    print(f"      CPU, share of a core: {cpu}")


def best(results: list[Result]) -> Result:
    return min(results, key=lambda r: r.elapsed)  # load from elsewhere only ever slows a round down


async def wait_connected(system: System) -> dict[str, Any]:
    """Each gateway's /readyz once it is connected to NATS (its hub subscribed): what it still misses."""
    found: dict[str, Any] = {}
    async with httpx.AsyncClient(timeout=2.0) as http:

        async def poll() -> None:
            for g in GATEWAYS:
                if g not in found:
                    body = (await http.get(f"{system.http_of(g)}/readyz")).json()
                    if "nats" not in body.get("missing", []):
                        found[g] = body

        deadline = time.perf_counter() + 30
        while len(found) < len(GATEWAYS) and time.perf_counter() < deadline:
            await poll()
            if len(found) < len(GATEWAYS):
                await asyncio.sleep(0.05)
    if len(found) < len(GATEWAYS):
        raise TimeoutError(f"gateways not connected to NATS: {sorted(set(GATEWAYS) - set(found))}")
    return found


async def run(args: argparse.Namespace) -> None:
    sizes = [int(n) for n in args.watchers.split(",")]
    root = Path(tempfile.mkdtemp(prefix="bench-scale-"))
    nats_srv = nats_server(root / "nats", auth=True).start()
    # The gateways log at INFO: one line per /chat connection attached, counted per gateway.
    system = System(root / "system", env={"LOG_LEVEL": "WARNING"}, nats=nats_srv)
    bus: Bus | None = None
    try:
        system.start("ledger", separate=True)
        system.start_one("gateway", env={"LOG_LEVEL": "INFO"})
        system.start_one("gateway", "gateway-2", env={"DELEGATE_PORT": str(free_port()), "LOG_LEVEL": "INFO"})
        system.wait_ready(GATEWAYS)
        ready = await wait_connected(system)
        print("NATS authentication on; nats-server, the ledger, two gateways as processes; no agent")
        for g in GATEWAYS:
            print(f"  {g} at {system.http_of(g)}: /readyz {json.dumps(ready[g], sort_keys=True)}")
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "bench-producer")
        bench = Bench(system, bus, args.events, args.timeout)

        # Warm-up: the ledger, NATS and both gateways' first events (not reported).
        await bench.gateways(2, GATEWAYS)

        for n in sizes:
            print(f"\n{n} receivers, {args.events} events published by this script, "
                  f"{args.rounds} round(s) per setup, the best reported")
            runs: dict[str, list[Result]] = {"floor": [], "one": [], "two": []}
            for _ in range(args.rounds):
                runs["floor"].append(await bench.floor(n))
                runs["one"].append(await bench.gateways(n, GATEWAYS[:1]))
                runs["two"].append(await bench.gateways(n, GATEWAYS))
            floor, one, two = best(runs["floor"]), best(runs["one"]), best(runs["two"])
            print(f"  {'':13}{'elapsed':>10}{'ev/s each':>12}{'frames/s all':>14}"
                  f"{'p50':>12}{'p99':>12}   (latency: publish -> arrival)")
            print(figures(floor))
            print(figures(one, floor, "one / floor"))
            print(figures(two, one, "two / one"))
            for result in (floor, one, two):
                details(result)
        print()
        for g in GATEWAYS:
            text = system.procs[g].log_text()
            problems = sum(1 for line in text.splitlines() if " WARNING " in line or " ERROR " in line)
            print(f"{g}: {problems} WARNING/ERROR lines in its log")
        print()
        print(textwrap.fill(CONCURRENT_CALLS, 110, subsequent_indent="  "))
    finally:
        if bus is not None:
            await bus.close()
        system.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--watchers", default="10,100,500", help="comma-separated numbers of watchers")
    parser.add_argument("--events", type=int, default=1000, help="ledger events published per round")
    parser.add_argument("--rounds", type=int, default=1, help="rounds per setup and size; the best is reported")
    parser.add_argument("--timeout", type=float, default=600, help="seconds a round may take")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Readiness probes connect and close a bus each: their "disconnected" warnings are noise here.
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
