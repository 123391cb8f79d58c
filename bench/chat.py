"""Chat path latency and throughput through the real processes, against a floor measured in the same run.

    .venv/bin/python bench/chat.py [--turns 1000] [--watchers 20] [--burst 200] [--events 5000] [--latency-only]
                                   [--compare-auth | --compare-memory | --compare-modes]

Starts nats-server, the ledger, the agent, the gateway (``python -m delegate.gateway``) and the
OpenAI stand-in answering instantly (no scripted latency), then measures:

  floor            a bare WebSocket echo through uvicorn (separate process): frame out -> frame back
  message -> ack   a /chat message frame -> its ack (validated, published to JetStream, PubAck)
  message -> delta a /chat message frame -> the first answer delta of that turn; turns one after
                   another, each waiting for the assistant message before the next
  stand-in alone   after each of those turns, the SDK straight to the stand-in (no Delegate), the
                   agent's own request (instructions, tools) continuing the same chain from the
                   response just recorded, sent the way the agent sends it: its first delta.
                   The stand-in's work grows with the chain, so only this pairing is fair.
  overhead         message -> delta minus the stand-in alone (each percentile): what Delegate
                   adds with the stand-in answering instantly
  messages/s       --burst messages sent at once while --watchers other clients watch everything;
                   from the first send until every watcher has every assistant message
  fan-out          --events ledger events published by this script (as a producer) until every
                   watcher has every one of them: what the ledger + gateway deliver without the agent

Ratios are against the floor of the same run: this machine's load changes absolute numbers.
``--compare-modes`` runs the latency part twice: a process per service, then every service in one
host process (``python -m delegate.host``, as ``make run`` runs them), and prints what the host
costs on the overhead (the issue's bound: at most 10% of the p50).
"""

import argparse
import asyncio
import json
import logging
import shutil
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import websockets  # noqa: E402
from openai import AsyncStream, RequestOptions  # noqa: E402

from delegate.contracts import topics  # noqa: E402
from delegate.contracts.events import Message, make_event  # noqa: E402
from delegate.contracts.messages import Delta, QueryRequest  # noqa: E402
from delegate.launcher.procs import free_port, wait_for_port  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402

ECHO_SERVER = textwrap.dedent(
    """
    import sys, uvicorn
    from starlette.applications import Starlette
    from starlette.routing import WebSocketRoute

    async def echo(ws):
        await ws.accept()
        while True:
            message = await ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            await ws.send_text(message["text"])

    uvicorn.run(Starlette(routes=[WebSocketRoute("/echo", echo)]), host="127.0.0.1",
                port=int(sys.argv[1]), log_level="warning")
    """
)


# How the agent calls the stand-in (delegate.agent.model): raw events, no typed-params transform.
RawEvents = AsyncStream[object]
BEARER: RequestOptions = {"security": {"bearer_auth": True}}

# The target for Delegate's own part, with the stand-in answering instantly.
TARGET_P50 = 0.005
TARGET_P99 = 0.020


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:7.2f} ms"


async def floor(n: int, frame: str) -> list[float]:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", ECHO_SERVER, str(port))
    try:
        await asyncio.to_thread(wait_for_port, port, 20)
        async with websockets.connect(f"ws://127.0.0.1:{port}/echo") as conn:
            for _ in range(50):
                await conn.send(frame)
                await conn.recv()
            samples = []
            for _ in range(n):
                t0 = time.perf_counter()
                await conn.send(frame)
                await conn.recv()
                samples.append(time.perf_counter() - t0)
            return samples
    finally:
        proc.terminate()
        await proc.wait()


async def hello(conn: websockets.ClientConnection, after_seq: int) -> int:
    await conn.send(json.dumps({"type": "hello", "after_seq": after_seq}))
    while True:
        frame = json.loads(await conn.recv())
        if frame["type"] == "ready":
            return int(frame["last_seq"])


def is_answer(frame: dict[str, Any]) -> bool:
    event = frame.get("event") or {}
    return frame["type"] == "event" and event.get("kind") == "message" and event.get("role") == "assistant"


class Turn:
    def __init__(self, sent: float) -> None:
        self.sent = sent
        self.acked = 0.0
        self.delta = 0.0  # first delta of this turn on the client's socket
        self.turn_id = ""
        self.response_id = ""  # of the assistant message: where the chain now ends
        self.standin = 0.0  # the stand-in alone, continuing from response_id: to its first delta


class StandinProbe:
    """The stand-in without Delegate: the agent's request, sent as the agent sends it, to the first delta."""

    def __init__(self, standin: StandinProcess, template: dict[str, Any]) -> None:
        self.client = standin.async_client(max_retries=0, timeout=60)
        self.template = {k: v for k, v in template.items() if k not in ("input", "previous_response_id", "stream")}

    async def first_delta(self, previous_response_id: str, text: str) -> float:
        body = {
            **self.template,
            "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}],
            "previous_response_id": previous_response_id,
            "stream": True,
        }
        t0 = time.perf_counter()
        stream = await self.client.post(
            "/responses", body=body, cast_to=object, stream=True, stream_cls=RawEvents, options=BEARER
        )
        first = 0.0
        async for event in stream:
            if not first and isinstance(event, dict) and event.get("type") == "response.output_text.delta":
                first = time.perf_counter() - t0
        if not first:
            raise RuntimeError("the stand-in sent no delta")
        return first

    async def close(self) -> None:
        await self.client.close()


async def turns(
    conn: websockets.ClientConnection, n: int, tag: str, probe: StandinProbe | None = None
) -> list[Turn]:
    """Sequential turns, each waiting for its assistant message before the next one is sent.

    With a probe, each turn is followed by one stand-in-alone request on the same chain.
    """
    done: list[Turn] = []
    for i in range(n):
        client_msg_id = f"{tag}-{i}"
        frame_out = {"type": "message", "text": f"turn {i}: say something", "client_msg_id": client_msg_id}
        turn = Turn(time.perf_counter())
        await conn.send(json.dumps(frame_out))
        first_delta: tuple[float, str] | None = None
        while True:
            frame = json.loads(await asyncio.wait_for(conn.recv(), 60))
            now = time.perf_counter()
            if frame["type"] == "ack" and frame.get("client_msg_id") == client_msg_id:
                turn.turn_id, turn.acked = frame["event_id"], now
            elif frame["type"] == "delta" and first_delta is None:
                first_delta = (now, frame["turn_id"])
            elif frame["type"] == "error":
                raise RuntimeError(f"turn {i}: {frame}")
            elif is_answer(frame) and turn.turn_id and frame["event"]["parent_id"] == turn.turn_id:
                turn.response_id = frame["event"]["payload"]["response_id"]
                break
        if first_delta is None or first_delta[1] != turn.turn_id:
            raise RuntimeError(f"turn {i}: no delta of its own ({first_delta}, {turn.turn_id})")
        turn.delta = first_delta[0]
        if probe is not None:
            turn.standin = await probe.first_delta(turn.response_id, frame_out["text"])
        done.append(turn)
    return done


class Watcher:
    """A client that reads everything and notes when it has seen what the bench waits for."""

    def __init__(self, conn: websockets.ClientConnection) -> None:
        self.conn = conn
        self.answers: set[str] = set()  # parent ids of assistant messages seen
        self.events: list[int] = []
        self.frames = 0
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        try:
            async for raw in self.conn:
                self.frames += 1
                frame = json.loads(raw)
                if frame["type"] == "event":
                    self.events.append(frame["event"]["seq"])
                    if is_answer(frame):
                        self.answers.add(frame["event"]["parent_id"])
                elif frame["type"] == "resync":
                    raise RuntimeError("a watcher was told to resync: it fell behind")
        except websockets.ConnectionClosed:
            return


async def until(predicate: Any, timeout: float, what: str) -> float:
    deadline = time.perf_counter() + timeout
    while not predicate():
        if time.perf_counter() > deadline:
            raise TimeoutError(what)
        await asyncio.sleep(0.002)
    return time.perf_counter()


async def run(
    args: argparse.Namespace, auth: bool, memory: bool = False, one_process: bool = False
) -> tuple[float, float]:
    """One whole run; returns Delegate's overhead to the first delta (p50, p99), in seconds.

    ``memory``: the memory service runs too, so every turn first searches memory (and each turn
    is extracted after it, off the hot path, sharing the two cores)."""
    root = Path(tempfile.mkdtemp(prefix="bench-chat-"))
    figures = await run_in(root, args, auth, memory, one_process)
    shutil.rmtree(root, ignore_errors=True)  # kept when the run failed: its logs say why
    return figures


async def run_in(
    root: Path, args: argparse.Namespace, auth: bool, memory: bool, one_process: bool
) -> tuple[float, float]:
    standin = StandinProcess(log_dir=root / "standin").start()
    env = {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "COMPACT_THRESHOLD": "10000000",  # this run measures the chat path, not compaction
        "IDLE_SPAN_SECONDS": "100000",
    }
    nats = nats_server(root / "nats", auth=auth).start()
    system = System(root / "system", env=env, nats=nats)
    print(f"NATS authentication {'on: every service logs in as its own role' if auth else 'off'}; "
          f"memory service {'on: retrieval before each turn' if memory else 'off'}; "
          f"{'one host process for every service' if one_process else 'a process per service'}")
    bus: Bus | None = None
    try:
        system.start("ledger", "agent", "gateway", *(("memory",) if memory else ()),
                     separate=not one_process, one_process=one_process)
        url = f"{system.ws}/chat?token={system.token}"
        sample_frame = json.dumps({"type": "message", "text": "turn 0: say something", "client_msg_id": "x-0"})

        print(f"floor: bare WebSocket echo through uvicorn, {args.turns} round trips")
        echo = await floor(args.turns, sample_frame)

        print(f"chat path: {args.turns} sequential turns, stand-in answering instantly, each followed by "
              "the stand-in alone on the same chain")
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "bench-probe")
        on_nats: dict[str, float] = {}  # first delta of each turn as NATS delivers it (to us and the gateway)

        async def seen_delta(delta: Delta) -> None:
            on_nats.setdefault(delta.turn_id, time.perf_counter())

        await bus.subscribe(topics.AGENT_DELTA, seen_delta)
        async with websockets.connect(url, max_size=None) as conn:
            await hello(conn, 0)
            await turns(conn, 20, "warmup")
            # The agent's own request, as the stand-in recorded it (read once: the log grows).
            probe = StandinProbe(standin, standin.response_requests()[-1]["body"])
            try:
                await turns(conn, 5, "probe-warmup", probe)
                measured = await turns(conn, args.turns, "turn", probe)
            finally:
                await probe.close()
        to_ack = [t.acked - t.sent for t in measured]
        to_delta = [t.delta - t.sent for t in measured]
        agent_part = [on_nats[t.turn_id] - t.acked for t in measured]
        hop = [t.delta - on_nats[t.turn_id] for t in measured]
        alone = [t.standin for t in measured]

        print()
        print(f"{'':34}{'p50':>11}{'p99':>11}{'mean':>11}   ratio to floor (p50 / p99)")
        f50, f99 = pct(echo, 50), pct(echo, 99)
        rows = (
            ("floor (ws echo)", echo),
            ("message -> ack", to_ack),
            ("message -> 1st delta", to_delta),
            ("  of which ack -> delta on NATS", agent_part),
            ("  of which NATS -> client (gw)", hop),
            ("stand-in alone -> 1st delta", alone),
        )
        for name, samples in rows:
            p50, p99 = pct(samples, 50), pct(samples, 99)
            ratio = "" if samples is echo else f"   {p50 / f50:6.1f}x / {p99 / f99:6.1f}x"
            print(f"{name:34}{ms(p50):>11}{ms(p99):>11}{ms(statistics.fmean(samples)):>11}{ratio}")
        added = {p: pct(to_delta, p) - pct(echo, p) for p in (50, 99)}
        over = {p: pct(to_delta, p) - pct(alone, p) for p in (50, 99)}
        paired = [t.delta - t.sent - t.standin for t in measured]
        print(f"{'added latency (- floor)':34}{ms(added[50]):>11}{ms(added[99]):>11}{'':11}"
              f"   {added[50] / f50:6.1f}x / {added[99] / f99:6.1f}x")
        print(f"{'Delegate overhead (- stand-in)':34}{ms(over[50]):>11}{ms(over[99]):>11}{'':11}"
              f"   {over[50] / f50:6.1f}x / {over[99] / f99:6.1f}x")
        print(f"{'  paired per turn (for reference)':34}{ms(pct(paired, 50)):>11}{ms(pct(paired, 99)):>11}"
              f"{ms(statistics.fmean(paired)):>11}")
        verdict = "met" if over[50] <= TARGET_P50 and over[99] <= TARGET_P99 else "NOT met"
        print(f"  target: overhead p50 <= {TARGET_P50 * 1000:.0f} ms, p99 <= {TARGET_P99 * 1000:.0f} ms: {verdict}")
        print("  (overhead = each percentile of message -> 1st delta minus the same percentile of the stand-in alone;")
        print("   ack -> delta on NATS is the agent: consume, the model request, opening events published meanwhile)")
        if args.latency_only:
            return over[50], over[99]

        print(f"\nthroughput: {args.burst} messages at once, {args.watchers} watchers")
        now = (await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=1))).last_seq
        watchers = []
        for _ in range(args.watchers):
            conn = await websockets.connect(url, max_size=None)
            await hello(conn, now)  # live from here: no history replay in this figure
            watchers.append(Watcher(conn))
        async with websockets.connect(url, max_size=None) as sender:
            await hello(sender, now)
            t0 = time.perf_counter()
            for i in range(args.burst):
                await sender.send(json.dumps({"type": "message", "text": f"burst {i}", "client_msg_id": f"burst-{i}"}))
            ids: list[str] = []
            while len(ids) < args.burst:
                frame = json.loads(await asyncio.wait_for(sender.recv(), 60))
                if frame["type"] == "ack":
                    ids.append(frame["event_id"])
                elif frame["type"] == "error":
                    raise RuntimeError(frame)
            acked = time.perf_counter()
            wanted = set(ids)
            done = await until(lambda: all(wanted <= w.answers for w in watchers), 600, "burst answers")
        elapsed = done - t0
        frames = sum(w.frames for w in watchers)
        accepted = args.burst / (acked - t0)
        print(f"  all {args.burst} acked after {acked - t0:.2f} s ({accepted:.0f} messages/s accepted)")
        print(
            f"  every watcher had every answer after {elapsed:.2f} s: {args.burst / elapsed:.1f} messages/s "
            f"answered, sustained ({frames} frames delivered, {frames / elapsed:.0f} frames/s across watchers)"
        )

        print(f"\nfan-out without the agent: {args.events} ledger events published by this script")
        base = (await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=1))).last_seq
        counts = [len(w.events) for w in watchers]
        events = [
            make_event(Message(text=f"fan-out {i}"), conversation_id=None, span_id=None, channel="text", role="user")
            for i in range(args.events)
        ]
        t0 = time.perf_counter()
        for start in range(0, len(events), 500):
            await asyncio.gather(*(bus.publish(topics.ledger_append("test"), e) for e in events[start:start + 500]))
        done = await until(
            lambda: all(len(w.events) - c >= args.events for w, c in zip(watchers, counts, strict=True)), 600, "fan-out"
        )
        elapsed = done - t0
        ordered = all(w.events == sorted(set(w.events)) for w in watchers)
        print(f"  every watcher had all {args.events} after {elapsed:.2f} s: {args.events / elapsed:.0f} events/s "
              f"per watcher, {args.events * args.watchers / elapsed:.0f} event frames/s in all; "
              f"in seq order, once each: {ordered} (ledger seq {base} -> {max(w.events[-1] for w in watchers)})")
        for w in watchers:
            await w.conn.close()
            w.task.cancel()
        return over[50], over[99]
    finally:
        if bus is not None:
            await bus.close()
        system.stop()
        standin.stop()


def latency_pair(args: argparse.Namespace, **second: bool) -> tuple[tuple[float, float], tuple[float, float]]:
    """The latency run as is, then with ``second`` (one_process, memory): the overheads of both."""
    latency = argparse.Namespace(**{**vars(args), "latency_only": True})
    first = asyncio.run(run(latency, auth=True))
    print()
    return first, asyncio.run(run(latency, auth=True, **second))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--watchers", type=int, default=20)
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--events", type=int, default=5000)
    parser.add_argument("--latency-only", action="store_true", help="stop after the latency figures")
    parser.add_argument("--compare-auth", action="store_true",
                        help="first a latency run with NATS authentication off, then the run with it on")
    parser.add_argument("--compare-memory", action="store_true",
                        help="the latency run without the memory service, then with it (retrieval before each turn)")
    parser.add_argument("--compare-modes", action="store_true",
                        help="the latency run with a process per service, then with every service in one host")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # Readiness probes connect and close a bus each: their "disconnected" warnings are noise here.
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    if args.compare_modes:
        split, host = latency_pair(args, one_process=True)
        print(f"\ncost of one host process on Delegate's overhead: p50 {ms(host[0])} vs {ms(split[0])} split "
              f"({(host[0] - split[0]) / split[0]:+.0%}; bound +10%), p99 {ms(host[1])} vs {ms(split[1])} "
              f"({(host[1] - split[1]) / split[1]:+.0%})")
        return
    if args.compare_memory:
        without, with_memory = latency_pair(args, memory=True)
        print(f"\ncost of retrieval before each turn on Delegate's overhead: p50 {ms(with_memory[0])} vs "
              f"{ms(without[0])} without the memory service (+{ms(with_memory[0] - without[0])}), "
              f"p99 {ms(with_memory[1])} vs {ms(without[1])}")
        return
    if not args.compare_auth:
        asyncio.run(run(args, auth=True))
        return
    # The cost of NATS authentication: the same latency run with it off, then on, as a ratio.
    off = asyncio.run(run(argparse.Namespace(**{**vars(args), "latency_only": True}), auth=False))
    print()
    on = asyncio.run(run(args, auth=True))
    print(f"\ncost of NATS authentication on Delegate's overhead: p50 {ms(on[0])} vs {ms(off[0])} off "
          f"({on[0] / off[0]:.2f}x), p99 {ms(on[1])} vs {ms(off[1])} ({on[1] / off[1]:.2f}x)")


if __name__ == "__main__":
    main()
