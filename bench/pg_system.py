"""The whole system on a 1,000,000-event ledger, SQLite and PostgreSQL side by side, against a small floor.

    .venv/bin/python bench/pg_system.py [--events 1000000] [--floor-events 30000] [--rounds 4] [--pages 50]
                                         [--turns 40] [--replay 5000] [--restarts 3] [--postgres URL] [--keep]

Three ledgers, each seeded straight into its store (not through the bus), then each run as the
whole system ``make run`` starts — nats-server with authentication on, and the ledger, agent,
inner plane, memory, tasks, voice, pollers and gateway as real processes (tests/support/system.py)
— with the OpenAI stand-in answering instantly:

  floor        SQLite, --floor-events events: every figure below does the same work on it (as many
               pages, as many replayed events), only the history is small
  SQLite       SQLite (the default backend), --events events
  PostgreSQL   a fresh PostgreSQL database on the server of --postgres (DATABASE_URL), the same
               --events events: the same rows, written to both ledgers in one pass

The history is what the system itself writes, at scale: 40 conversations (the last one open), each
of spans of 1-12 turns; a turn is the user message, memory.retrieved, context.usage, the assistant
message (its response id) and the per-turn memory.extracted; a closed span ends with its checkpoint,
span.closed and the checkpoint's episode (memory.extracted), sometimes a context.capsule; the last
span of the open conversation is open. Timestamps run over years and end a minute before the run,
so what the system adds comes after them. Rows go in through the store's own write path (migrations,
``insert_params``, the summary tables, ``announced_through``), in batches of 5,000, SQLite with
``synchronous=OFF`` for the load only; PostgreSQL gets a VACUUM ANALYZE afterwards (what autovacuum
does to a table of this size within its first minute).

Figures, per ledger:

  seed            writing the rows through the store (not a system figure; the PostgreSQL
                  database's size is pg_database_size, SQLite's the file with its WAL)
  cold start      service processes started (NATS already listening) -> every service ready:
                  the gateway's /healthz, every other service's ping. The memory index and the
                  inner plane's state are new, so both replay the whole ledger before they say
                  ready; the agent resumes the open conversation (checked against /api/state)
  warm start      the whole system stopped (SIGTERM) and started again on the same data, the
                  projections current -> every service ready; per service alongside
  newest page     GET /api/timeline: the newest page (TIMELINE_HISTORY_EVENT_LIMIT events)
  walk back       GET /api/timeline?before=<cursor of the page before>, --pages pages back from the
                  newest, each page timed
  oldest part     GET /api/timeline?before=<cursor>, jumping to cursors among the oldest events
                  (seq 1,000 to 1,000 + 2% of the history)
  hello replay    a new /chat socket says hello with after_seq = the newest seq - --replay: until its
                  ready frame, every event after that seq delivered
  first delta     a /chat message frame -> the first delta of its turn (bench/chat.py's measure),
                  turns one after another; the memory service searches its index before each
  resume query    ledger.cmd.resume over NATS (what an agent asks when it takes over), raw reply
  agent restart   the agent stopped (SIGTERM) and started again -> its ping says ready (it has
                  resumed the conversation from the ledger)

Seeding and the cold and warm starts run one system at a time, alone on the machine. Then all
three run at once and take turns, round by round (--rounds), for the latency figures and the
agent restarts, so load from elsewhere falls on all of them alike. Ratios are against the floor
of the same run (and PostgreSQL against SQLite). Prints figures; asserts nothing. On a shared
2-core machine trust the ratios more than the absolute figures.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402
import websockets  # noqa: E402

from bench.chat import hello, turns  # noqa: E402
from bench.ledger import fresh_pg_database  # noqa: E402
from bench.stats import pct  # noqa: E402
from delegate.contracts import topics  # noqa: E402
from delegate.contracts.cursor import Cursor  # noqa: E402
from delegate.contracts.events import Event  # noqa: E402
from delegate.contracts.ids import new_id  # noqa: E402
from delegate.contracts.messages import QueryRequest, ResumeRequest  # noqa: E402
from delegate.launcher.procs import NatsServer  # noqa: E402
from delegate.ledger.store import LedgerStore, sqlite_path  # noqa: E402
from delegate.ledger.store.base import Row, insert_params  # noqa: E402
from delegate.ledger.store.postgres import PostgresStore  # noqa: E402
from delegate.ledger.store.sqlite import SqliteStore  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402

PG_ADMIN = "postgresql://postgres@127.0.0.1:5432/postgres"
PG_DATABASE = "bench_pg_system_ledger"
# What `make run` starts (delegate.launcher.run.SERVICES), in its order.
SERVICES = ("ledger", "agent", "inner-plane", "memory", "tasks", "voice", "pollers", "gateway")
CONVERSATIONS = 40
SEED_BATCH = 5000  # rows per store.write while seeding
OLDEST_FROM = 1000  # the oldest-part cursors start here, so every page before them is full
OLDEST_SHARE = 0.02
WARMUP_TURNS = 10
RESUME_ASKS = 10  # ledger.cmd.resume requests per round
NEWEST_ASKS = 10  # newest-page requests per round
OLDEST_JUMPS = 10  # oldest-part jumps per round
HELLOS = 2  # hello replays per round
START_TIMEOUT = 3600.0

USER_TEXTS = (
    "Can you remind me what we decided about the flat viewing on Thursday, and who is bringing the keys?",
    "I talked to Marta about the budget again; she thinks we should wait until the spring before buying.",
    "Please keep a note that the dentist moved my appointment to the 14th at half past nine in the morning.",
    "What was the name of the restaurant near the river that we liked last autumn? I want to book it again.",
)
ASSISTANT_TEXT = (
    "Noted. You decided to view the flat on Thursday at six; Marta has the keys and will meet you there. "
    "I will remind you an hour before, and I have kept the budget question open for the spring."
)
EPISODE = "They talked about the flat viewing, the budget with Marta and a dentist appointment; nothing is open."
CAPSULE = "The owner is looking for a flat with Marta, keeps appointments in notes and prefers short answers."


# ---- the history ------------------------------------------------------------------------------


@dataclass
class Plan:
    """One seeded history, the same for every ledger it is written to."""

    events: int
    open_conversation: str = ""
    oldest: list[Cursor] = field(default_factory=list)  # cursors among the oldest events
    span_us: int = 0  # first to last timestamp, microseconds


def history(n: int, plan: Plan, seed: int = 7) -> Iterator[tuple[int, dict[str, Any]]]:
    """The events of the history, in commit order: (microseconds since its first event, fields).

    Deterministic for ``seed`` except for the ids, so a dry pass gives the time span and the
    real pass the same shape. The fields are an ``Event``'s, less ``ts``.
    """
    rng = random.Random(seed)
    clock = 0
    seq = 0
    per_conv = max(n // CONVERSATIONS, 200)
    last_checkpoint = 0  # the previous checkpoint's through_seq: the next one's after_seq

    def event(gap_us: int, kind: str, conv: str, span: str | None, payload: dict[str, Any], *,
              channel: str = "text", role: str | None = None, parent: str | None = None) -> tuple[int, dict[str, Any]]:
        nonlocal clock, seq
        clock += max(gap_us, 1)
        seq += 1
        return clock, {"id": new_id(), "kind": kind, "conversation_id": conv, "span_id": span, "channel": channel,
                       "role": role, "parent_id": parent, "payload": payload}

    def turn(conv: str, span: str) -> Iterator[tuple[int, dict[str, Any]]]:
        text = USER_TEXTS[seq % len(USER_TEXTS)]
        user = event(rng.randint(5_000_000, 300_000_000), "message", conv, span,
                     {"text": text, "client_msg_id": f"seed-{seq}", "response_id": None, "meta": {}}, role="user")
        yield user
        uid = user[1]["id"]
        response = f"resp_seed_{seq:09d}"
        yield event(rng.randint(5_000, 50_000), "memory.retrieved", conv, span,
                    {"query": text, "items": [], "purpose": "turn", "tokens": 0, "budget_tokens": 1500,
                     "late": False, "surfaced": True}, parent=uid)
        yield event(rng.randint(300_000, 3_000_000), "context.usage", conv, span,
                    {"response_id": response, "input_tokens": 2800 + seq % 4000, "output_tokens": 60,
                     "total_tokens": 2860 + seq % 4000, "cached_tokens": 2688, "compact_threshold": 200000},
                    parent=uid)
        yield event(rng.randint(5_000, 20_000), "message", conv, span,
                    {"text": ASSISTANT_TEXT, "client_msg_id": None, "response_id": response, "meta": {}},
                    role="assistant", parent=uid)
        yield event(rng.randint(1_000_000, 5_000_000), "memory.extracted", conv, span,
                    {"checkpoint_id": None, "items": [], "turn_ids": [uid]}, channel="inner", parent=uid)

    while seq < n:
        conv = new_id()
        final = n - seq <= per_conv * 3 // 2  # the last conversation takes the rest, and stays open
        budget = n if final else seq + per_conv
        if final:
            plan.open_conversation = conv
        yield event(rng.randint(3_600_000_000, 86_400_000_000) if seq else 0, "conversation.opened", conv, None,
                    {"reason": "first_input"})
        while seq < budget:
            span = new_id()
            yield event(rng.randint(60_000_000, 3_600_000_000), "span.opened", conv, span, {"type": "interaction"})
            # The last span of the open conversation stays open: turns until the history is full.
            last_span = final and n - seq <= 70
            user_ids: list[str] = []
            for _ in range(rng.randint(1, 12) if not last_span else n):
                if last_span and n - seq < 5:
                    break
                for e in turn(conv, span):
                    if e[1]["role"] == "user":
                        user_ids.append(e[1]["id"])
                    yield e
            if last_span:
                while seq < n:  # fewer than a turn left: late retrievals, as a slow search leaves them
                    yield event(rng.randint(5_000, 50_000), "memory.retrieved", conv, span,
                                {"query": "", "items": [], "purpose": "turn", "late": True, "surfaced": False,
                                 "reason": "not_novel"}, parent=user_ids[-1] if user_ids else None)
                break
            through = seq
            checkpoint = event(900_000_000, "checkpoint", conv, span,
                               {"after_seq": last_checkpoint, "through_seq": through, "turn_count": len(user_ids),
                                "turn_ids": user_ids, "first_event_id": None, "last_event_id": None})
            yield checkpoint
            yield event(10_000, "span.closed", conv, span, {"reason": "idle", "summary": None})
            yield event(rng.randint(2_000_000, 10_000_000), "memory.extracted", conv, span,
                        {"checkpoint_id": checkpoint[1]["id"], "items": [], "summary": EPISODE,
                         "after_seq": last_checkpoint, "through_seq": through, "turn_ids": user_ids},
                        channel="inner", parent=checkpoint[1]["id"])
            last_checkpoint = through
            if rng.random() < 0.2 and (not final or n - seq > 80):
                yield event(rng.randint(1_000_000, 5_000_000), "context.capsule", conv, None,
                            {"text": CAPSULE, "through_seq": seq, "through_event_id": None, "reason": "threshold"},
                            channel="inner")
        if not final:
            yield event(rng.randint(1_000_000, 60_000_000), "conversation.ended", conv, None, {"reason": "user"})


def rows(plan: Plan) -> Iterator[list[Row]]:
    """The history as the store's rows (``insert_params`` of each validated ``Event``), in batches.

    A dry pass first measures its time span, so that the real one ends a minute before now.
    """
    for clock, _ in history(plan.events, Plan(plan.events)):
        plan.span_us = clock
    start = datetime.now(UTC) - timedelta(microseconds=plan.span_us) - timedelta(minutes=1)
    rng = random.Random(13)
    wanted = set(rng.sample(range(OLDEST_FROM, OLDEST_FROM + max(int(plan.events * OLDEST_SHARE), 1)),
                            min(50, max(int(plan.events * OLDEST_SHARE), 1))))
    batch: list[Row] = []
    for index, (clock, fields) in enumerate(history(plan.events, plan)):
        event = Event(**fields, ts=start + timedelta(microseconds=clock))
        if index + 1 in wanted:
            plan.oldest.append(Cursor(event.ts, event.id))
        batch.append(insert_params(event))
        if len(batch) >= SEED_BATCH:
            yield batch
            batch = []
    if batch:
        yield batch


async def seed(plan: Plan, stores: list[LedgerStore]) -> list[float]:
    """Write the history to every store through its own write path; seconds spent in each."""
    spent = [0.0] * len(stores)
    for store in stores:
        await store.open()  # the ledger's migrations
    written = 0
    for batch in rows(plan):
        written += len(batch)
        for i, store in enumerate(stores):
            t0 = time.perf_counter()
            await store.write(batch, announced_through=written)
            spent[i] += time.perf_counter() - t0
    for i, store in enumerate(stores):
        last = await store.last_seq()
        if last != plan.events:
            raise RuntimeError(f"{store.backend}: {last} events stored of {plan.events}")
        t0 = time.perf_counter()
        await store.close()
        spent[i] += time.perf_counter() - t0
    return spent


# ---- one system -------------------------------------------------------------------------------


@dataclass
class Figures:
    seed: float = 0.0
    db_bytes: int = 0
    cold: dict[str, float] = field(default_factory=dict)  # service -> seconds to ready
    warm: dict[str, float] = field(default_factory=dict)
    resumed: bool = False  # the agent resumed the seeded open conversation (cold start)
    newest: list[float] = field(default_factory=list)
    walk: list[float] = field(default_factory=list)
    walk_events: list[int] = field(default_factory=list)  # events returned per walk
    oldest: list[float] = field(default_factory=list)
    replay: list[float] = field(default_factory=list)
    replayed: list[int] = field(default_factory=list)
    to_delta: list[float] = field(default_factory=list)
    resume: list[float] = field(default_factory=list)
    restart: list[float] = field(default_factory=list)
    restart_resumed: list[bool] = field(default_factory=list)


class Setup:
    """One ledger and the whole system on it, on its own NATS and stand-in."""

    def __init__(self, name: str, root: Path, events: int, *, database_url: str | None = None) -> None:
        self.name = name
        self.plan = Plan(events)
        self.database_url = database_url
        self.standin = StandinProcess(log_dir=root / "standin")
        self.nats: NatsServer = nats_server(root / "nats", auth=True)
        env = {
            "OPENAI_API_KEY": TEST_API_KEY,
            "OPENAI_BASE_URL": "",  # the stand-in's, once it has started
            "LOG_LEVEL": "WARNING",
            "COMPACT_THRESHOLD": "10000000",  # the paths measured here, not compaction
            "IDLE_SPAN_SECONDS": "100000",  # no idle checkpoint in the middle of a figure
            **({"DATABASE_URL": database_url} if database_url else {}),
        }
        self.system = System(root / "system", env=env, nats=self.nats)
        self.figures = Figures()
        self.bus: Bus | None = None
        self.http: httpx.AsyncClient | None = None
        self.conn: websockets.ClientConnection | None = None
        self.running = False

    @property
    def sqlite(self) -> Path:
        return sqlite_path(self.system.runtime)

    def store(self, *, seeding: bool) -> LedgerStore:
        if self.database_url:
            return PostgresStore(self.database_url)
        self.sqlite.parent.mkdir(parents=True, exist_ok=True)
        return SqliteStore(self.sqlite, synchronous="OFF" if seeding else "FULL")

    def database_size(self) -> int:
        if self.database_url:
            with psycopg.connect(self.database_url, autocommit=True) as conn:
                row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
                return int(row[0]) if row else 0
        return sum(p.stat().st_size for p in self.sqlite.parent.glob(self.sqlite.name + "*"))

    # -- start and stop ---------------------------------------------------------------------

    async def start(self, label: str | None = None) -> dict[str, float]:
        """NATS, then every service at once; seconds from their start until each is ready."""
        if not self.standin.process or not self.standin.alive():
            self.standin.start()
            self.system.extra_env["OPENAI_BASE_URL"] = self.standin.base_url
        self.nats.start()
        t0 = time.perf_counter()
        for name in SERVICES:
            proc = self.system.procs.get(name)
            if proc is None:
                self.system.start_one(name)
            else:
                proc.start()
        ready = await self.wait_ready(SERVICES, t0, label)
        self.running = True
        self.bus = await Bus.connect(self.nats.url, "bench")
        self.http = httpx.AsyncClient(base_url=self.system.http, headers=self.system.auth(), timeout=120)
        return ready

    async def wait_ready(self, names: tuple[str, ...], t0: float, label: str | None) -> dict[str, float]:
        """Every service polled on its own (a ping nobody serves yet fails at once: no responders)."""
        ready: dict[str, float] = {}
        async with contextlib.AsyncExitStack() as stack:
            probe = await Bus.connect(self.nats.url, "bench-probe")
            stack.push_async_callback(probe.nc.close)
            http = await stack.enter_async_context(httpx.AsyncClient(timeout=1.0))

            async def poll(name: str) -> None:
                proc = self.system.procs[name]
                while not await self._ready(probe, http, name):
                    if not proc.alive():
                        raise RuntimeError(f"{self.name}: {name} died during start:\n{proc.log_text()[-4000:]}")
                    await asyncio.sleep(0.02)
                ready[name] = time.perf_counter() - t0
                if label:
                    print(f"    {label}: {name:<12} ready after {ready[name]:8.2f} s", flush=True)

            try:
                await asyncio.wait_for(asyncio.gather(*(poll(name) for name in names)), START_TIMEOUT)
            except TimeoutError:
                raise TimeoutError(f"{self.name}: not ready after {START_TIMEOUT:.0f} s: "
                                   f"{sorted(set(names) - set(ready))}") from None
        return ready

    async def _ready(self, probe: Bus, http: httpx.AsyncClient, name: str) -> bool:
        if name == "gateway":
            try:
                return (await http.get(f"{self.system.http}/healthz")).status_code == 200
            except httpx.HTTPError:
                return False
        try:
            return (await probe.ping(name, timeout=0.5)).ready
        except Exception:
            return False

    async def stop(self) -> None:
        if not self.running:
            return
        self.running = False
        if self.conn is not None:
            await self.conn.close()
            self.conn = None
        if self.http is not None:
            await self.http.aclose()
            self.http = None
        if self.bus is not None:
            await self.bus.close()
            self.bus = None
        await asyncio.to_thread(self.system.stop)

    async def close(self) -> None:
        await self.stop()
        await asyncio.to_thread(self.standin.stop)

    # -- what the figures need ------------------------------------------------------------------

    async def conversation(self) -> str | None:
        assert self.http is not None
        found = (await self.http.get("/api/state")).json().get("conversation_id")
        return found if isinstance(found, str) else None

    async def last_seq(self) -> int:
        assert self.bus is not None
        return (await self.bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=2**62, limit=1))).last_seq

    async def chat(self) -> websockets.ClientConnection:
        if self.conn is None:
            self.conn = await websockets.connect(f"{self.system.ws}/chat?token={self.system.token}", max_size=None)
            await hello(self.conn, await self.last_seq())
        return self.conn

    async def page(self, before: str | None) -> tuple[float, dict[str, Any]]:
        assert self.http is not None
        params = {"before": before} if before else None
        t0 = time.perf_counter()
        reply = await self.http.get("/api/timeline", params=params)
        elapsed = time.perf_counter() - t0
        reply.raise_for_status()
        return elapsed, reply.json()

    async def one_round(self, args: argparse.Namespace, round_no: int, turn_count: int) -> None:
        f = self.figures
        for _ in range(NEWEST_ASKS):
            f.newest.append((await self.page(None))[0])
        _, body = await self.page(None)
        walked = 0
        for _ in range(args.pages):
            if body["cursor"] is None:
                break
            elapsed, body = await self.page(body["cursor"])
            f.walk.append(elapsed)
            walked += len(body["events"])
        f.walk_events.append(walked)
        for cursor in random.Random(round_no).sample(self.plan.oldest, min(OLDEST_JUMPS, len(self.plan.oldest))):
            f.oldest.append((await self.page(cursor.encode()))[0])
        for _ in range(HELLOS):
            elapsed, count = await self.hello_replay(args.replay)
            f.replay.append(elapsed)
            f.replayed.append(count)
        assert self.bus is not None
        body_bytes = ResumeRequest(turn_limit=20).model_dump_json().encode()
        for _ in range(RESUME_ASKS):
            t0 = time.perf_counter()
            await self.bus.nc.request(topics.LEDGER_RESUME.subject, body_bytes, timeout=30)
            f.resume.append(time.perf_counter() - t0)
        measured = await turns(await self.chat(), turn_count, f"round-{round_no}")
        f.to_delta += [t.delta - t.sent for t in measured]

    async def hello_replay(self, back: int) -> tuple[float, int]:
        """A new /chat socket: hello with after_seq ``back`` events before the newest -> its ready frame."""
        after = max(await self.last_seq() - back, 0)
        async with websockets.connect(f"{self.system.ws}/chat?token={self.system.token}", max_size=None) as conn:
            t0 = time.perf_counter()
            await conn.send(json.dumps({"type": "hello", "after_seq": after}))
            count = 0
            while True:
                frame = json.loads(await asyncio.wait_for(conn.recv(), 60))
                if frame["type"] == "event":
                    count += 1
                elif frame["type"] == "ready":
                    return time.perf_counter() - t0, count
                elif frame["type"] in ("error", "resync"):
                    raise RuntimeError(f"{self.name}: hello after seq {after}: {frame}")

    async def restart_agent(self) -> None:
        proc = self.system.procs["agent"]
        await asyncio.to_thread(proc.stop)
        t0 = time.perf_counter()
        proc.start()
        ready = await self.wait_ready(("agent",), t0, None)
        self.figures.restart.append(ready["agent"])
        self.figures.restart_resumed.append(await self.conversation() == self.plan.open_conversation)


# ---- the report -------------------------------------------------------------------------------

Value = float | list[float]


def shown(value: Value, unit: str) -> str:
    """One figure: seconds, or a list's p50 / p99 (ms) or p50 / max (s)."""
    if isinstance(value, float):
        return f"{value:.2f} s"
    if not value:
        return "-"
    if unit == "s":
        return f"{pct(value, 50):.2f} / {max(value):.2f} s"
    return f"{pct(value, 50) * 1000:.1f} / {pct(value, 99) * 1000:.1f} ms"


def times(value: Value, base: Value) -> str:
    """``value`` as a multiple of ``base``: one ratio, or p50 / p99 (p50 / max) of two lists."""
    def one(a: float, b: float) -> str:
        return f"{a / b:.1f}x" if b > 0 else "-"

    if isinstance(value, float) and isinstance(base, float):
        return one(value, base)
    if isinstance(value, list) and isinstance(base, list) and value and base:
        return f"{one(pct(value, 50), pct(base, 50))} / {one(pct(value, 99), pct(base, 99))}"
    return "-"


def report(floor: Setup, sqlite: Setup, postgres: Setup) -> None:
    widths = (44, 20, 20, 14, 20, 14, 14)
    head = ("", floor.name, sqlite.name, "x floor", postgres.name, "x floor", "x SQLite")
    sizes = ("", *(f"{s.plan.events:,} events" for s in (floor, sqlite)), "", f"{postgres.plan.events:,} events")

    def row(cells: tuple[str, ...]) -> None:
        print("".join(f"{c:<{w}}" for c, w in zip(cells, widths, strict=False)).rstrip())

    def figure(label: str, get: Callable[[Figures], Value], unit: str = "ms") -> None:
        f, s, p = get(floor.figures), get(sqlite.figures), get(postgres.figures)
        row((label, shown(f, unit), shown(s, unit), times(s, f), shown(p, unit), times(p, f), times(p, s)))

    print()
    row(head)
    row(sizes)
    row(("seed: rows written through the store",
         *(f"{x.figures.seed:.1f} s" for x in (floor, sqlite)), "", f"{postgres.figures.seed:.1f} s"))
    row(("  database size", *(f"{x.figures.db_bytes / 2**20:,.0f} MiB" for x in (floor, sqlite)), "",
         f"{postgres.figures.db_bytes / 2**20:,.0f} MiB"))
    for label, attr in (("cold start (empty projections)", "cold"), ("warm start (projections current)", "warm")):
        figure(f"{label}: all ready", partial(start_time, attr, None))
        for name in SERVICES:
            figure(f"  {name}", partial(start_time, attr, name))
    row(("  cold: agent resumed the open conversation",
         *(str(x.figures.resumed) for x in (floor, sqlite)), "", str(postgres.figures.resumed)))
    figure("newest page, p50 / p99", lambda f: f.newest)
    figure("walk back, each page, p50 / p99", lambda f: f.walk)
    row(("  events per walk (mean)", *(f"{mean(x.figures.walk_events):,.0f}" for x in (floor, sqlite)), "",
         f"{mean(postgres.figures.walk_events):,.0f}"))
    figure("oldest part, jump by cursor, p50 / p99", lambda f: f.oldest)
    figure("hello replay -> ready, p50 / p99", lambda f: f.replay)
    row(("  events replayed per hello (mean)", *(f"{mean(x.figures.replayed):,.0f}" for x in (floor, sqlite)),
         "", f"{mean(postgres.figures.replayed):,.0f}"))
    figure("message -> first delta, p50 / p99", lambda f: f.to_delta)
    figure("ledger.cmd.resume over NATS, p50 / p99", lambda f: f.resume)
    figure("agent restart -> ready, p50 / max", lambda f: f.restart, "s")
    row(("  the agent resumed the open conversation",
         *(f"{sum(x.figures.restart_resumed)} of {len(x.figures.restart_resumed)}" for x in (floor, sqlite)), "",
         f"{sum(postgres.figures.restart_resumed)} of {len(postgres.figures.restart_resumed)}"))


def start_time(attr: str, service: str | None, figures: Figures) -> float:
    """A start figure (``cold`` or ``warm``): one service's, or all ready (the last one's)."""
    ready: dict[str, float] = getattr(figures, attr)
    return ready[service] if service else max(ready.values())


def mean(values: list[int]) -> float:
    return sum(values) / len(values) if values else 0.0


# ---- the run ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def workspace(keep: bool) -> AsyncIterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="bench-pg-system-"))
    try:
        yield root
    finally:
        if keep:
            print(f"logs and databases kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


async def run(args: argparse.Namespace) -> None:
    print(f"the whole system on {args.events:,} events, SQLite and PostgreSQL, against a floor of "
          f"{args.floor_events:,} events on SQLite; {os.cpu_count()} cores, SQLite {sqlite3.sqlite_version}")
    async with contextlib.AsyncExitStack() as stack:
        root = await stack.enter_async_context(workspace(args.keep))
        pg_url = stack.enter_context(fresh_pg_database(args.postgres, PG_DATABASE))
        floor = Setup("floor: SQLite", root / "floor", args.floor_events)
        setups = [
            Setup("SQLite", root / "sqlite", args.events),
            Setup("PostgreSQL", root / "postgres", args.events, database_url=pg_url),
        ]
        every = [floor, *setups]
        for setup in every:
            stack.push_async_callback(setup.close)

        print("seeding", flush=True)
        floor.figures.seed = (await seed(floor.plan, [floor.store(seeding=True)]))[0]
        print(f"  floor: {floor.plan.events:,} events in {floor.figures.seed:.1f} s", flush=True)
        setups[1].plan = setups[0].plan  # one pass writes the same rows to both
        spent = await seed(setups[0].plan, [s.store(seeding=True) for s in setups])
        for setup, seconds_spent in zip(setups, spent, strict=True):
            setup.figures.seed = seconds_spent
            print(f"  {setup.name}: {setup.plan.events:,} events in {seconds_spent:.1f} s", flush=True)
        t0 = time.perf_counter()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        print(f"  PostgreSQL: VACUUM ANALYZE in {time.perf_counter() - t0:.1f} s", flush=True)
        for setup in every:
            setup.figures.db_bytes = setup.database_size()

        # Unmeasured: the first start on the machine reads every service's code from disk.
        warmup = Setup("warm-up", root / "warm-up", 0)
        await warmup.start()
        await warmup.close()
        print("cold and warm starts, one system at a time", flush=True)
        for setup in every:
            setup.figures.cold = await setup.start(f"{setup.name} cold")
            setup.figures.resumed = await setup.conversation() == setup.plan.open_conversation
            await setup.stop()
            setup.figures.warm = await setup.start(f"{setup.name} warm")
            await setup.stop()

        print(f"side by side: {args.rounds} rounds, the systems taking turns", flush=True)
        for setup in every:
            await setup.start()
            await turns(await setup.chat(), WARMUP_TURNS, "warmup")
        for r in range(args.rounds):
            count = args.turns // args.rounds + (r < args.turns % args.rounds)
            for setup in every:
                await setup.one_round(args, r, count)
            print(f"  round {r + 1} done", flush=True)
        print(f"agent restarts: {args.restarts} per system, taking turns", flush=True)
        for _ in range(args.restarts):
            for setup in every:
                await setup.restart_agent()
        for setup in every:
            await setup.stop()
    report(floor, *setups)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the SQLite and PostgreSQL ledgers")
    parser.add_argument("--floor-events", type=int, default=30_000, help="events in the floor's SQLite ledger")
    parser.add_argument("--rounds", type=int, default=4, help="rounds of the latency figures, the systems alternating")
    parser.add_argument("--pages", type=int, default=50, help="pages walked back from the newest, per round")
    parser.add_argument("--turns", type=int, default=40, help="chat turns measured per system (over all rounds)")
    parser.add_argument("--replay", type=int, default=5000, help="events back from the newest a hello asks for")
    parser.add_argument("--restarts", type=int, default=3, help="agent restarts per system")
    parser.add_argument("--postgres", default=os.environ.get("BENCH_PG_URL", PG_ADMIN),
                        help="admin URL of a PostgreSQL server (a database of its own is created and dropped)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (logs, SQLite files)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)  # "disconnected" as each probe closes
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
