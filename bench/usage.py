"""What metering costs a turn, and how fast GET /api/usage answers at scale (issue #29).

    .venv/bin/python bench/usage.py [--turns 200] [--events 1000000] [--usage 100000] [--requests 200]

1. Metering on the chat path. The agent's own streamed call (``delegate.agent.model.stream_response``)
   against the OpenAI stand-in answering instantly, --turns times with the meter on (its usage
   event published to a real JetStream stream, as the ledger subject takes it) and --turns with
   it off, alternating so both see the same machine. Timed: the call's start to its first delta
   (what metering could add to the chat's overhead to first delta) and to its end (the usage
   event is written beside the caller, after the last delta). Target: <= 0.5 ms added at p50.

2. GET /api/usage at scale. A ledger of --events events (the history bench/ledger.py builds, of
   which --usage are model.usage calls spread over 40 days, their projection rows written by the
   ledger's own code as its writer does), served by the real ledger and gateway processes.
   Timed: --requests GET /api/usage?group=purpose for the last 30 days through the gateway, and
   the floor, GET /readyz-free /api/usage/calls of an unknown span (the same HTTP and bus hops,
   an index seek in the ledger). Target: p95 <= 50 ms.

Prints figures; asserts nothing. On a shared 2-core machine trust the ratios over the absolutes.
"""

import argparse
import asyncio
import json
import random
import sqlite3
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import nats  # noqa: E402

from bench.ledger import generate_history  # noqa: E402
from bench.stats import pct  # noqa: E402
from delegate.agent.model import stream_response  # noqa: E402
from delegate.contracts.events import Event, ModelUsage, make_event  # noqa: E402
from delegate.contracts.ids import new_id  # noqa: E402
from delegate.ledger.store import sqlite_path  # noqa: E402
from delegate.ledger.store.base import stored  # noqa: E402
from delegate.ledger.store.sqlite import INSERT_EVENT, connect, event_row  # noqa: E402
from delegate.ledger.store.usage import UPSERT_HOUR, UPSERT_SPAN, usage_changes  # noqa: E402
from delegate.runtime.metering import Cause, Meter, MeteredStream  # noqa: E402
from delegate.runtime.openai_client import LazyOpenAI  # noqa: E402
from delegate.runtime.pricing import load_prices  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402

PURPOSES = ("owner_turn", "activation", "memory_extraction", "capsule", "compaction", "web_search", "task_step",
            "voice")


def row(label: str, samples: list[float], floor: list[float] | None = None) -> None:
    p50, p95, p99 = (pct(samples, q) * 1000 for q in (50, 95, 99))
    ratio = f"   x{pct(samples, 50) / pct(floor, 50):.2f} of the floor at p50" if floor else ""
    print(f"  {label:34}{p50:9.3f}{p95:9.3f}{p99:9.3f} ms{ratio}")


# ---- 1. metering on the chat path -------------------------------------------------------------


async def one_call(client: LazyOpenAI, meter: Meter, n: int) -> tuple[float, float]:
    start = time.perf_counter()
    first = 0.0

    async def on_delta(_: str) -> None:
        nonlocal first
        if not first:
            first = time.perf_counter()

    request = {"model": "gpt-5.5", "input": [{"role": "user", "content": f"turn {n}: say something"}],
               "store": False}
    await stream_response(client, request, on_delta=on_delta, meter=meter,
                          cause=Cause("owner_turn", "text", f"turn-{n}", conversation_id="c", span_id="s"))
    return first - start, time.perf_counter() - start


async def bench_metering(turns: int, root: Path) -> None:
    print(f"1. metering on the chat path: {turns} streamed calls with the meter on, {turns} off, alternating")
    standin = StandinProcess(log_dir=root / "standin").start()
    server = nats_server(root / "nats", auth=False).start()
    nc = await nats.connect(server.url)
    js = nc.jetstream()
    await js.add_stream(name="LEDGER", subjects=["ledger.evt.append.>"])
    published = 0

    async def publish(event: Event) -> None:
        nonlocal published
        await js.publish("ledger.evt.append.agent", event.model_dump_json().encode(), headers={"Nats-Msg-Id": event.id})
        published += 1

    prices = load_prices(None)
    on, off = Meter(publish, prices), Meter(publish, prices, enabled=False)
    # As the agent holds it: stream_response takes the lazily loaded client, not the SDK's own.
    client = LazyOpenAI(timeout=30.0, max_retries=0, without_key="",
                        endpoint={"api_key": TEST_API_KEY, "base_url": standin.base_url})
    try:
        for n in range(30):  # warm both paths
            await one_call(client, on if n % 2 else off, n)
        await on.drain()
        first: dict[bool, list[float]] = {True: [], False: []}
        whole: dict[bool, list[float]] = {True: [], False: []}
        for n in range(turns * 2):
            metered = n % 2 == 0
            f, w = await one_call(client, on if metered else off, n)
            first[metered].append(f)
            whole[metered].append(w)
        await on.drain()
        print(f"  {'':34}{'p50':>9}{'p95':>9}{'p99':>9}")
        row("call -> 1st delta, meter off", first[False])
        row("call -> 1st delta, meter on", first[True], first[False])
        row("call -> end, meter off", whole[False])
        row("call -> end, meter on", whole[True], whole[False])
        added = (pct(first[True], 50) - pct(first[False], 50)) * 1000
        print(f"  metering adds {added:+.3f} ms at p50 to the first delta (target <= 0.5 ms); "
              f"{published - 15} usage events published during the measured calls")
        await wrapper_cost(2000)
    finally:
        await (await client.get()).close()
        await nc.close()
        server.stop()
        standin.stop()


class Replay:
    """The events of one recorded response, replayed as fast as they can be read (no network)."""

    def __init__(self, events: list[object]) -> None:
        self.events = events

    async def __aiter__(self) -> Any:
        for event in self.events:
            yield event

    async def close(self) -> None:
        return None


async def wrapper_cost(rounds: int) -> None:
    """The meter's own work per streamed event, without the network's noise: the events of a
    recorded response read through ``MeteredStream`` and directly, alternating."""
    deltas = [{"type": "response.output_text.delta", "delta": "word "} for _ in range(40)]
    final = {"type": "response.completed", "response": {"id": "resp_1", "status": "completed", "output": [],
             "usage": {"input_tokens": 900, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 40}}}
    events = [{"type": "response.created", "response": {"id": "resp_1"}}, *deltas, final]

    async def publish(event: Event) -> None:
        return None

    meter = Meter(publish, load_prices(None))
    cause = Cause("owner_turn", "text", "t")
    plain: list[float] = []
    metered: list[float] = []
    for _ in range(rounds):
        t = time.perf_counter()
        async for _event in Replay(events):
            pass
        plain.append(time.perf_counter() - t)
        t = time.perf_counter()
        async for _event in MeteredStream(Replay(events), meter, cause, "gpt-5.5"):
            pass
        metered.append(time.perf_counter() - t)
    await meter.drain()
    per_event = (pct(metered, 50) - pct(plain, 50)) / len(events) * 1e6
    record = (pct(metered, 50) - pct(plain, 50)) * 1e6
    print(f"  the wrapper alone, {len(events)} events a response: {per_event:.2f} us an event; the whole "
          f"response including pricing and queuing its usage event: {record:.1f} us (p50 of {rounds})")


# ---- 2. GET /api/usage at scale ---------------------------------------------------------------


def add_usage(path: Path, count: int, now: datetime) -> None:
    """``count`` model.usage events over the last 40 days, and their projection rows, written by
    the ledger's own row and projection code (as its writer would, in bulk)."""
    conn = connect(path, journal_mode="WAL", synchronous="OFF")
    rng = random.Random(11)
    start = now - timedelta(days=40)
    step = timedelta(days=40) / count
    seq = int(conn.execute("SELECT MAX(seq) FROM conversation_events").fetchone()[0])
    conn.execute("BEGIN")
    batch: list[tuple[Any, ...]] = []
    for i in range(count):
        purpose = rng.choice(PURPOSES)
        span = f"run-{i // 4}" if purpose in ("activation", "task_step") else None
        payload = ModelUsage(model="gpt-5.5", purpose=purpose, cause_id=span, input_tokens=rng.randint(500, 20000),
                             cached_tokens=rng.randint(0, 400), output_tokens=rng.randint(20, 800),
                             web_search_calls=int(purpose == "web_search"), cost_usd=round(rng.random() / 50, 6))
        event = make_event(payload, conversation_id="c-usage", span_id=span, channel="inner", id=new_id(),
                           ts=start + step * i)
        batch.append(event_row(event))
        if len(batch) == 20_000 or i == count - 1:
            conn.executemany(INSERT_EVENT, batch)
            changes = usage_changes([stored(r, seq + k + 1) for k, r in enumerate(batch)])
            conn.executemany(UPSERT_HOUR, changes.hours)
            conn.executemany(UPSERT_SPAN, changes.spans)
            seq += len(batch)
            batch.clear()
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()


async def bench_api(events: int, usage: int, requests: int, root: Path) -> None:
    print(f"2. GET /api/usage: {events:,} ledger events of which {usage:,} model.usage, "
          f"{requests} requests for 30 days grouped by purpose")
    system = System(root / "system", env={"LOG_LEVEL": "WARNING"})
    path = sqlite_path(system.runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    generate_history(path, events - usage)
    add_usage(path, usage, datetime.now(UTC))
    with sqlite3.connect(path) as conn:
        total = conn.execute("SELECT COUNT(*) FROM conversation_events").fetchone()[0]
        hours = conn.execute("SELECT COUNT(*) FROM usage_hours").fetchone()[0]
    print(f"  built in {time.perf_counter() - t0:.0f} s: {total:,} events, {hours:,} usage_hours rows")
    try:
        system.start("ledger", "gateway", separate=True)
        async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=30) as http:
            for _ in range(20):  # warm the caches and the connection
                (await http.get("/api/usage", params={"group": "purpose"})).raise_for_status()
            grouped: list[float] = []
            floor: list[float] = []
            body: dict[str, Any] = {}
            for _ in range(requests):
                t = time.perf_counter()
                r = await http.get("/api/usage", params={"group": "purpose"})
                grouped.append(time.perf_counter() - t)
                body = r.json()
                t = time.perf_counter()
                (await http.get("/api/usage/calls", params={"span_id": "no-such-span"})).raise_for_status()
                floor.append(time.perf_counter() - t)
            by_day = []
            for _ in range(requests // 2):
                t = time.perf_counter()
                (await http.get("/api/usage", params={"group": "day"})).raise_for_status()
                by_day.append(time.perf_counter() - t)
        calls = sum(r["calls"] for r in body["rows"])
        usd = sum(r["cost_usd"] for r in body["rows"])
        print(f"  the answer: {len(body['rows'])} purposes, {calls:,} calls, ${usd:,.2f}")
        print(f"  {'':34}{'p50':>9}{'p95':>9}{'p99':>9}")
        row("floor: /api/usage/calls (a seek)", floor)
        row("/api/usage group=purpose, 30 d", grouped, floor)
        row("/api/usage group=day, 30 d", by_day, floor)
        print(f"  p95 {pct(grouped, 95) * 1000:.1f} ms for 30 days grouped by purpose (target <= 50 ms)")
        print(json.dumps({"usage_api_p95_ms": round(pct(grouped, 95) * 1000, 2)}))
    finally:
        system.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--usage", type=int, default=100_000)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--skip-metering", action="store_true")
    parser.add_argument("--skip-api", action="store_true")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-usage-"))
    if not args.skip_metering:
        await bench_metering(args.turns, root)
        print()
    if not args.skip_api:
        await bench_api(args.events, args.usage, args.requests, root)


if __name__ == "__main__":
    asyncio.run(main())
