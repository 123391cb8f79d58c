"""The inner plane's attention broker and reminders, through the real processes, against a floor.

    .venv/bin/python bench/inner.py [--signals 2000] [--latency 300] [--reminders 1000]
                                    [--spread-s 20] [--restarts 50]

Starts nats-server, the ledger and the inner plane (as ``make run`` starts them; no agent: an
activation simply waits in the AGENT stream, which the broker's decisions do not depend on).

  floor        raw JetStream on the same server: publish with ack -> a durable pull consumer
               fetches and acks it; latency one at a time, throughput with 256 in flight
  decision     a signal published on inner.evt.signal -> its inner.decision committed (the bench
               hears the ledger's committed notification). Every signal is already expired, so
               each gets a ``drop`` decision at once: the path is intake -> ledger -> follower ->
               decision -> ledger, with no coalescing window or budget in the way.
               Latency one at a time; throughput = --signals published at once / time until
               the last decision is committed
  reminders    --reminders one-shot reminders set through ``inner.cmd.reminders`` with due times
               on whole seconds spread over --spread-s seconds; accuracy = due time -> the
               reminder.due inner.signal committed
  restarts     three recurring reminders (every 1, 2 and 3 s) while the inner plane is killed
               (SIGKILL or SIGTERM, at random) and restarted --restarts times at random moments;
               then every occurrence from the first to the last settled one is counted: fired
               twice = duplicate; never fired and not dropped with a recorded reason = unexplained miss

Targets: reminder accuracy <= 1 s p99; 0 duplicates and 0 unexplained misses.
"""

import argparse
import asyncio
import contextlib
import logging
import random
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import nats.errors  # noqa: E402
from nats.js.api import ConsumerConfig, StorageType, StreamConfig  # noqa: E402

from bench.stats import ms, pct  # noqa: E402
from delegate.contracts import topics  # noqa: E402
from delegate.contracts.events import Event  # noqa: E402
from delegate.contracts.reminders import ReminderCommand, ReminderSpec  # noqa: E402
from delegate.contracts.signals import ScriptPayload, ScriptSignal  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402
from tests.support.system import System  # noqa: E402

TARGET_REMINDER_P99 = 1.0
FLOOR_STREAM = "BENCH_FLOOR"
FLOOR_SUBJECT = "bench.floor"


class Committed:
    """The ledger's committed notifications, with the monotonic time each one arrived."""

    def __init__(self) -> None:
        self.arrived: dict[str, tuple[float, Event]] = {}
        self.by_parent: dict[str, list[Event]] = {}
        # (reminder id, due time) -> the ids of the reminder.due inner.signal events committed for it
        self.fires: dict[tuple[str, str], list[str]] = {}
        self.changed = asyncio.Event()

    async def on_event(self, event: Event) -> None:
        # Kept cheap and incremental: a slow callback here would delay the arrival stamps.
        now = time.monotonic()
        if event.id in self.arrived:
            return
        self.arrived[event.id] = (now, event)
        if event.parent_id is not None:
            self.by_parent.setdefault(event.parent_id, []).append(event)
        if event.kind == "inner.signal" and event.payload.get("signal_kind") == "reminder.due":
            payload = event.payload["signal"]["payload"]
            self.fires.setdefault((payload["reminder_id"], payload["due_at"]), []).append(event.id)
        self.changed.set()

    def decision_at(self, signal_id: str) -> float | None:
        for event in self.by_parent.get(signal_id, []):
            if event.kind == "inner.decision":
                return self.arrived[event.id][0]
        return None

    async def wait(self, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the inner plane did not get there in time")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))


# ---- floor ---------------------------------------------------------------------------------


async def floor(bus: Bus, latency_n: int, throughput_n: int) -> tuple[list[float], float]:
    js = bus.js
    await js.add_stream(StreamConfig(name=FLOOR_STREAM, subjects=[FLOOR_SUBJECT], storage=StorageType.FILE))
    psub = await js.pull_subscribe(FLOOR_SUBJECT, durable="bench-floor", stream=FLOOR_STREAM,
                                   config=ConsumerConfig(durable_name="bench-floor", max_ack_pending=10_000))
    samples = []
    for i in range(latency_n):
        t0 = time.monotonic()
        await js.publish(FLOOR_SUBJECT, f"{i}".encode())
        msgs = await psub.fetch(1, timeout=5)
        for msg in msgs:
            await msg.ack()
        samples.append(time.monotonic() - t0)
    t0 = time.monotonic()
    body = b"x" * 600  # about an inner.signal's size

    async def publish_all() -> None:
        pending: list[Any] = []
        for _ in range(throughput_n):
            pending.append(asyncio.ensure_future(js.publish(FLOOR_SUBJECT, body)))
            if len(pending) >= 256:
                await asyncio.gather(*pending)
                pending.clear()
        await asyncio.gather(*pending)

    publisher = asyncio.create_task(publish_all())
    got = 0
    while got < throughput_n:
        try:
            msgs = await psub.fetch(min(256, throughput_n - got), timeout=5)
        except nats.errors.TimeoutError:
            continue
        for msg in msgs:
            await msg.ack()
        got += len(msgs)
    await publisher
    rate = throughput_n / (time.monotonic() - t0)
    await psub.unsubscribe()
    return samples, rate


# ---- the broker ----------------------------------------------------------------------------


def expired_signal(i: int) -> ScriptSignal:
    past = datetime.now(UTC) - timedelta(seconds=1)
    return ScriptSignal(source="bench", expires_at=past, payload=ScriptPayload(text=f"bench signal {i}"))


async def decisions(bus: Bus, seen: Committed, latency_n: int, throughput_n: int) -> tuple[list[float], float]:
    samples = []
    for i in range(latency_n):
        signal = expired_signal(i)
        t0 = time.monotonic()
        await bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
        await seen.wait(lambda: seen.decision_at(signal.id) is not None, 30)  # noqa: B023
        decided = seen.decision_at(signal.id)
        assert decided is not None
        samples.append(decided - t0)
    batch = [expired_signal(latency_n + i) for i in range(throughput_n)]
    t0 = time.monotonic()
    for start in range(0, len(batch), 256):
        await asyncio.gather(*(bus.publish(topics.INNER_SIGNAL, s, msg_id=s.id) for s in batch[start:start + 256]))
    await seen.wait(lambda: all(seen.decision_at(s.id) is not None for s in batch[-50:]), 600)
    await seen.wait(lambda: all(seen.decision_at(s.id) is not None for s in batch), 600)
    last = max(t for s in batch if (t := seen.decision_at(s.id)) is not None)
    return samples, throughput_n / (last - t0)


# ---- reminders -----------------------------------------------------------------------------


async def set_reminder(bus: Bus, spec: ReminderSpec) -> str:
    reply = await bus.request(topics.INNER_REMINDERS, ReminderCommand(op="set", spec=spec), timeout=30)
    return reply.reminders[0].id


def due_key(due: datetime) -> str:
    return str(ReminderSpec(text="x", at=due).model_dump(mode="json")["at"])


async def reminder_accuracy(bus: Bus, seen: Committed, n: int, spread_s: float) -> list[float]:
    # Whole seconds, as people set them ("at 9:00"), far enough ahead for all of them to be set.
    base = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=5 + n // 50)
    dues = [base + timedelta(seconds=int(i * spread_s / n)) for i in range(n)]
    wanted: dict[tuple[str, str], datetime] = {}
    for start in range(0, n, 50):
        chunk = dues[start:start + 50]
        ids = await asyncio.gather(*(
            set_reminder(bus, ReminderSpec(text=f"bench reminder {start + i}", at=due, grace_s=3600))
            for i, due in enumerate(chunk)
        ))
        for rid, due in zip(ids, chunk, strict=True):
            wanted[(rid, due_key(due))] = due
    assert datetime.now(UTC) < base, "setting the reminders took longer than their lead time"
    offset = time.time() - time.monotonic()
    await seen.wait(lambda: all(k in seen.fires for k in wanted), spread_s + 120)
    lateness = []
    for key, due in wanted.items():
        arrived = seen.arrived[seen.fires[key][0]][0] + offset
        lateness.append(arrived - due.timestamp())
    return lateness


async def restarts(system: System, bus: Bus, seen: Committed, count: int) -> tuple[int, int, int, int]:
    """Returns (occurrences checked, duplicates, unexplained misses, restarts done)."""
    rng = random.Random(14)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(seconds=2)
    ids = []
    for every in (1, 2, 3):
        ids.append(await set_reminder(bus, ReminderSpec(
            text=f"every {every} s", rrule=f"FREQ=SECONDLY;INTERVAL={every}", start=start, grace_s=3600)))
    for _ in range(count):
        await asyncio.sleep(rng.uniform(0.2, 1.5))  # a random moment to fail at: the point of the bench
        if rng.random() < 0.5:
            system.kill("inner-plane")
        else:
            system.procs["inner-plane"].stop()
        await asyncio.to_thread(system.restart, "inner-plane")
    end = datetime.now(UTC) - timedelta(seconds=2)
    # Everything due before ``end`` must have settled: fired (maybe late) or dropped with a reason.
    await seen.wait(lambda: _settled(seen, ids, start, end), 120)
    checked, duplicates, misses = 0, 0, 0
    got = seen.fires
    for index, rid in enumerate(ids):
        every = index + 1
        due = start
        while due <= end:
            checked += 1
            n = len(got.get((rid, due_key(due)), []))
            duplicates += max(0, n - 1)
            misses += n == 0
            due += timedelta(seconds=every)
    return checked, duplicates, misses, count


def _settled(seen: Committed, ids: list[str], start: datetime, end: datetime) -> bool:
    got = seen.fires
    for index, rid in enumerate(ids):
        due = start
        while due <= end:
            if (rid, due_key(due)) not in got:
                return False
            due += timedelta(seconds=index + 1)
    return True


# ---- main ----------------------------------------------------------------------------------


def row(name: str, samples: list[float]) -> str:
    return f"  {name:<34} p50 {ms(pct(samples, 50))}   p99 {ms(pct(samples, 99))}   (n={len(samples)})"


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        system = System(Path(tmp), env={"OPENAI_API_KEY": "bench-unused", "INNER_COALESCE_S": "0"})
        system.start("ledger", "inner-plane", separate=True)
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "bench")
        seen = Committed()
        await bus.subscribe(topics.LEDGER_COMMITTED, seen.on_event)
        try:
            floor_lat, floor_rate = await floor(bus, args.latency, args.signals)
            dec_lat, dec_rate = await decisions(bus, seen, args.latency, args.signals)
            accuracy = await reminder_accuracy(bus, seen, args.reminders, args.spread_s)
            checked, dups, misses, done = await restarts(system, bus, seen, args.restarts)
        finally:
            await bus.close()
            system.stop()
    print("\nThe attention broker (real nats-server, ledger, inner plane)")
    print(row("floor: JetStream publish -> consume", floor_lat))
    print(row("signal -> inner.decision committed", dec_lat))
    print(f"  {'ratio p50 (decision / floor)':<34} {pct(dec_lat, 50) / pct(floor_lat, 50):9.1f} x")
    print(f"  {'floor throughput':<34} {floor_rate:9.0f} msgs/s")
    print(f"  {'broker throughput':<34} {dec_rate:9.0f} signals/s "
          f"({dec_rate / floor_rate * 100:.1f}% of the floor)")
    print(f"\nReminder firing accuracy: due -> reminder.due committed (n={len(accuracy)})")
    print(f"  p50 {pct(accuracy, 50) * 1000:8.1f} ms   p99 {pct(accuracy, 99) * 1000:8.1f} ms   "
          f"max {max(accuracy) * 1000:8.1f} ms   (target p99 <= {TARGET_REMINDER_P99 * 1000:.0f} ms: "
          f"{'met' if pct(accuracy, 99) <= TARGET_REMINDER_P99 else 'NOT met'})")
    print(f"\nRandomized restarts of the inner plane: {done}")
    print(f"  occurrences checked {checked}   duplicate fires {dups}   unexplained misses {misses}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--signals", type=int, default=2000)
    parser.add_argument("--latency", type=int, default=300)
    parser.add_argument("--reminders", type=int, default=1000)
    parser.add_argument("--spread-s", type=float, default=20.0)
    parser.add_argument("--restarts", type=int, default=50)
    asyncio.run(main(parser.parse_args()))
