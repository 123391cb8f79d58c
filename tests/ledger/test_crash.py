"""Real processes: the ledger or its writer process SIGKILLed mid-burst, NATS restarted
mid-burst, a graceful SIGTERM.

Afterwards the database holds every published event exactly once, and whatever
was announced on ledger.live.committed is in the database with the same seq.
"""

import asyncio
import functools
import os
import signal
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.launcher.procs import NatsServer
from delegate.ledger.store import sqlite_path
from delegate.runtime.bus import Bus
from tests.support.system import System
from tests.support.waiting import eventually

from .builders import message, span_opened

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOTAL = 10_000


@dataclass
class Watch:
    bus: Bus
    published: int = 0
    announced: dict[str, set[int]] = field(default_factory=dict)


@pytest.fixture
async def watch(system: System) -> AsyncIterator[Watch]:
    # Short ack wait: a killed ledger's in-flight batch comes back after 2 s, not 10.
    system.extra_env["LEDGER_ACK_WAIT_SECONDS"] = "2"
    await asyncio.to_thread(system.start, "ledger", separate=("ledger",))
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "crash-test")
    w = Watch(bus)

    async def on_committed(event: Event) -> None:
        w.announced.setdefault(event.id, set()).add(event.seq or 0)

    await bus.subscribe(topics.LEDGER_COMMITTED, on_committed)
    yield w
    await bus.close()


def _events(n: int) -> list[Event]:
    out: list[Event] = []
    for i in range(n):
        span = f"span-{i // 50}"
        out.append(span_opened(span) if i % 50 == 0 else message(f"m{i}", span=span))
    return out


async def _publish(w: Watch, events: list[Event], window: int = 200) -> None:
    """In flight, like a busy producer; bus.publish retries, Nats-Msg-Id dedupes the retries."""
    gate = asyncio.Semaphore(window)

    async def one(event: Event) -> None:
        async with gate:
            await w.bus.publish(topics.ledger_append("test"), event, deadline=60)
            w.published += 1

    await asyncio.gather(*(one(e) for e in events))


def _db_rows(system: System) -> dict[str, int]:
    with sqlite3.connect(sqlite_path(system.runtime)) as conn:
        return dict(conn.execute("SELECT id, seq FROM conversation_events").fetchall())


def _db_count(system: System) -> int:
    try:
        with sqlite3.connect(sqlite_path(system.runtime), timeout=5) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM conversation_events").fetchone()[0])
    except sqlite3.OperationalError:
        return 0


async def _settled(system: System, events: list[Event], w: Watch) -> dict[str, int]:
    await eventually(lambda: _db_count(system) >= len(events), "every event stored", 60)
    rows = _db_rows(system)
    assert len(rows) == len(events) == len(set(rows.values()))
    assert set(rows) == {e.id for e in events}
    for event_id, seqs in w.announced.items():
        assert seqs == {rows[event_id]}, f"{event_id} announced as {seqs}, stored as {rows[event_id]}"
    return rows


def _writer_pid(ledger_pid: int) -> int | None:
    """The ledger's writer process (its child running delegate.ledger.writer), if running."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == ledger_pid and b"delegate.ledger.writer" in cmdline:
            return int(entry)
    return None


def _announced_more_than(watch: Watch, count: int) -> bool:
    return len(watch.announced) > count


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except OSError:
        return True


async def test_ledger_killed_twice_mid_burst_loses_and_duplicates_nothing(system: System, watch: Watch) -> None:
    events = _events(TOTAL)
    # Three slices; each kill falls between two of them, so it always lands mid-burst (with
    # the ledger busy on its backlog) however fast this machine publishes.
    slices = [events[: TOTAL // 4], events[TOTAL // 4 : TOTAL // 2], events[TOTAL // 2 :]]
    await _publish(watch, slices[0])
    seen = 0
    for rest in slices[1:]:
        await eventually(functools.partial(_announced_more_than, watch, seen), "the ledger writing")
        seen = len(watch.announced)
        writer = _writer_pid(system.procs["ledger"].pid)
        assert writer is not None
        await asyncio.to_thread(system.kill, "ledger")
        # Its writer process sees its input end, answers what it holds, and exits: no orphan
        # is left holding the database.
        await eventually(functools.partial(_gone, writer), "the orphaned writer exiting", 15)
        system.procs["ledger"].start()
        # Publish on while the ledger restarts; the next kill waits until it is back.
        await asyncio.gather(_publish(watch, rest), asyncio.to_thread(system.wait_ready, ["ledger"]))
    await _settled(system, events, watch)
    # The restarted ledger re-announces what its killed predecessor committed but may not have
    # announced, so every event was announced at least once (subscribers dedupe by seq).
    await eventually(lambda: len(watch.announced) == TOTAL, "every event announced")


async def test_writer_process_killed_twice_mid_burst_loses_and_duplicates_nothing(
    system: System, watch: Watch
) -> None:
    """The writer dies with batches in flight (one being committed, one queued behind it):
    the ledger starts another, JetStream delivers the unacked batches again, and what the
    dead writer committed without reporting is announced by the ledger's recovery."""
    events = _events(TOTAL)
    slices = [events[: TOTAL // 4], events[TOTAL // 4 : TOTAL // 2], events[TOTAL // 2 :]]
    ledger_pid = system.procs["ledger"].pid
    await _publish(watch, slices[0])
    seen = 0
    killed: list[int] = []
    for rest in slices[1:]:
        await eventually(functools.partial(_announced_more_than, watch, seen), "the ledger writing")
        seen = len(watch.announced)
        await eventually(lambda: _writer_pid(ledger_pid) not in (None, *killed), "a writer process")
        writer = _writer_pid(ledger_pid)
        assert writer is not None
        os.kill(writer, signal.SIGKILL)
        killed.append(writer)
        await _publish(watch, rest)
    await _settled(system, events, watch)
    await eventually(lambda: len(watch.announced) == TOTAL, "every event announced")
    assert system.procs["ledger"].alive() and system.procs["ledger"].pid == ledger_pid
    assert _writer_pid(ledger_pid) not in (None, *killed)
    log = system.procs["ledger"].log_text()
    assert log.count("writer process") >= 2 and "ended (exit code -9)" in log, log[-3000:]


async def test_nats_restarted_mid_burst_loses_and_duplicates_nothing(system: System, watch: Watch) -> None:
    assert isinstance(system.nats, NatsServer)  # one server here: a cluster restarts node by node
    events = _events(TOTAL // 2)
    publishing = asyncio.create_task(_publish(watch, events))
    await eventually(lambda: watch.published >= len(events) // 3, "a third published")
    assert not publishing.done()
    await asyncio.to_thread(system.nats.restart)
    await publishing
    await _settled(system, events, watch)
    assert system.procs["ledger"].alive()


async def test_sigterm_finishes_the_batch_in_hand_and_exits_cleanly(system: System, watch: Watch) -> None:
    events = _events(3000)
    await _publish(watch, events)
    await eventually(lambda: len(watch.announced) > 0, "the ledger writing")
    code = await asyncio.to_thread(system.procs["ledger"].stop, 15.0)
    assert code == 0, system.procs["ledger"].log_text()[-3000:]
    stored = _db_count(system)
    system.procs["ledger"].start()
    await asyncio.to_thread(system.wait_ready, ["ledger"])
    rows = await _settled(system, events, watch)
    assert stored <= len(rows)
    assert "stopped" in Path(system.procs["ledger"].log_path).read_text()
