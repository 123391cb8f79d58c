"""The ledger follower in this process, against a real nats-server and the real ledger.

The follower is the inner plane's one way in: everything committed reaches the components
through it. These tests give it a handler and a state file they control, to show what the
whole process cannot: which thread writes the state, how full its queue gets, and what
happens to an event whose handler raises.
"""

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import ConversationOpened, Event, Message, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import DeadLetter
from delegate.inner_plane.context import Context
from delegate.inner_plane.follower import DEAD_LETTER_SOURCE, LedgerFollower
from delegate.inner_plane.model import Model
from delegate.inner_plane.settings import Settings
from delegate.inner_plane.state import InnerState, StateFile
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import Harness

pytestmark = [pytest.mark.integration]

# How long a gated write waits for the test before giving up (then the test fails on it).
GATE_TIMEOUT = 60.0


class GatedStateFile(StateFile):
    """A state file whose writes wait until the test opens the gate, and say where they ran."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.gate = threading.Event()
        self.gate.set()
        self.writing = threading.Event()  # a write is waiting at the closed gate
        self.threads: set[int] = set()
        self.writes = 0
        self.gate_timed_out = False

    def write(self, data: bytes, generation: int) -> None:
        self.threads.add(threading.get_ident())
        self.writing.set()
        if not self.gate.wait(GATE_TIMEOUT):
            self.gate_timed_out = True
        self.writing.clear()
        self.writes += 1
        super().write(data, generation)


class Recorder:
    """The follower's handler: records what it was given; raises for the poisoned ids."""

    def __init__(self) -> None:
        self.applied: list[Event] = []
        self.poisoned: set[str] = set()
        self.attempts: dict[str, int] = {}

    def __call__(self, event: Event) -> None:
        self.attempts[event.id] = self.attempts.get(event.id, 0) + 1
        if event.id in self.poisoned:
            raise ValueError(f"poisoned event {event.id}")
        self.applied.append(event)

    def ids(self) -> list[str]:
        return [e.id for e in self.applied]


Follow = Callable[..., Awaitable[LedgerFollower]]


@pytest.fixture
async def harness(system: System) -> AsyncIterator[Harness]:
    system.start("ledger")
    h = await Harness.connect(system)
    yield h
    await h.close()


@pytest.fixture
async def follow(system: System, tmp_path: Path) -> AsyncIterator[Follow]:
    """Start a follower on its own connection (the inner plane's identity); stopped at the end."""
    opened: list[tuple[Bus, asyncio.Task[None], Context]] = []

    async def _follow(recorder: Recorder, state_file: StateFile, **settings: Any) -> LedgerFollower:
        assert system.nats is not None
        config = Settings(nats_url=system.nats.url, runtime_data_dir=tmp_path, **settings)
        # As the inner plane's own identity: what the follower does must be allowed to it.
        bus = await Bus.connect(role_url(system.nats, "inner-plane"), "inner-plane:follower-test")
        ctx = Context(settings=config, bus=bus, model=Model(config), state_file=state_file, state=state_file.load())
        follower = LedgerFollower(ctx, recorder)
        await follower.start()
        task = asyncio.create_task(follower.run())
        opened.append((bus, task, ctx))
        await asyncio.wait_for(ctx.caught_up.wait(), 30)
        return follower

    yield _follow
    for bus, task, ctx in opened:
        ctx.stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await ctx.model.close()
        await bus.close()


async def _say(h: Harness, conversation_id: str, text: str) -> Event:
    return await h.append(Message(text=text), conversation_id=conversation_id, span_id=None, role="user")


async def _processed(follower: LedgerFollower, seq: int | None) -> None:
    assert seq is not None

    async def done() -> bool:
        return follower.ctx.state.last_seq >= seq

    await eventually(done, f"the follower to pass seq {seq}")


async def test_a_failing_event_is_retried_then_dead_lettered_and_the_next_ones_are_handled(
    harness: Harness, follow: Follow, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    h = harness
    recorder = Recorder()
    follower = await follow(recorder, StateFile(tmp_path / "state.json"))
    cid = new_id()
    opened = await h.append(ConversationOpened(), conversation_id=cid, span_id=None)
    # The poison's id is known before it is committed: the handler raises for it from the start.
    poison = Message(text="I make the handler raise")
    poison_event = make_event(poison, conversation_id=cid, span_id=None, channel="text", role="user")
    recorder.poisoned.add(poison_event.id)
    with caplog.at_level(logging.WARNING, logger="delegate"):
        await h.bus.publish(topics.ledger_append("test"), poison_event)
        committed_poison = await h.committed(poison_event.id)
        after = [await _say(h, cid, f"after the poison {n}") for n in range(3)]
        await _processed(follower, after[-1].seq)

    # Tried the configured number of times, then passed over; everything after it was handled, in order.
    assert recorder.attempts[poison_event.id] == follower.ctx.settings.inner_event_attempts
    mine = [i for i in recorder.ids() if i in {opened.id, *(e.id for e in after), poison_event.id}]
    assert mine == [opened.id, *(e.id for e in after)]
    assert all(recorder.attempts[e.id] == 1 for e in after)

    # Parked in the DEAD stream with its reason and the event itself.
    msg = await h.bus.js.get_last_msg("DEAD", topics.dead_letters(DEAD_LETTER_SOURCE).subject)
    assert msg.data is not None
    letter = DeadLetter.model_validate_json(msg.data)
    assert letter.consumer == DEAD_LETTER_SOURCE
    assert "poisoned event" in letter.reason and f"{follower.ctx.settings.inner_event_attempts} times" in letter.reason
    parked = Event.model_validate_json(letter.data)
    assert (parked.id, parked.seq) == (poison_event.id, committed_poison.seq)

    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "dead-lettering" in r.getMessage()]
    assert len(warnings) == 1 and poison_event.id in warnings[0].getMessage()


async def test_the_state_is_written_off_the_event_loop_while_live_intake_goes_on(
    harness: Harness, follow: Follow, tmp_path: Path
) -> None:
    h = harness
    state_file = GatedStateFile(tmp_path / "state.json")
    recorder = Recorder()
    follower = await follow(recorder, state_file)
    loop_thread = threading.get_ident()
    cid = new_id()

    state_file.gate.clear()
    held = await h.append(ConversationOpened(), conversation_id=cid, span_id=None)

    async def writing() -> bool:
        return state_file.writing.is_set()

    await eventually(writing, "the follower's state write to wait at the gate")
    # The write is held up; the loop is not: this test's own bus traffic goes on, and the
    # follower's live handler takes the next notification while the write waits.
    later = await _say(h, cid, "committed while the state write is stuck")

    async def queued() -> bool:
        return follower.queue.qsize() >= 1  # ``later``: the follower is still stuck before it

    await eventually(queued, "the live notification to be queued during the held write")
    assert follower.ctx.state.last_seq == held.seq, "the follower moved on before its state was durable"

    state_file.gate.set()
    await _processed(follower, later.seq)

    async def on_disk() -> bool:
        return StateFile(state_file.path).load().last_seq >= (later.seq or 0)

    await eventually(on_disk, "the newest state on disk")
    assert not state_file.gate_timed_out
    assert loop_thread not in state_file.threads, "the state file was written on the event loop's thread"


async def test_a_burst_bigger_than_the_queue_is_fully_processed_and_the_queue_stays_bounded(
    harness: Harness, follow: Follow, tmp_path: Path
) -> None:
    h = harness
    bound = 4
    state_file = GatedStateFile(tmp_path / "state.json")
    recorder = Recorder()
    # A long resync interval: the burst must come through the live queue, not a catch-up.
    follower = await follow(recorder, state_file, inner_queue_max=bound, inner_resync_seconds=120)
    cid = new_id()

    # The follower is held in a state write while the burst is committed: the queue fills.
    state_file.gate.clear()
    first = await h.append(ConversationOpened(), conversation_id=cid, span_id=None)

    async def writing() -> bool:
        return state_file.writing.is_set()

    await eventually(writing, "the follower's state write to wait at the gate")
    burst = [await _say(h, cid, f"burst {n}") for n in range(5 * bound)]

    async def full() -> bool:
        return follower.queue.full()

    await eventually(full, "the follower's queue to fill up")
    assert follower.queue.qsize() == bound

    state_file.gate.set()
    await _processed(follower, burst[-1].seq)
    expected = [first.id, *(e.id for e in burst)]
    assert [i for i in recorder.ids() if i in set(expected)] == expected, "lost, repeated or reordered"
    assert follower.high_water == bound
    assert not state_file.gate_timed_out


async def test_saves_during_a_write_are_coalesced_and_older_state_never_overwrites_newer(tmp_path: Path) -> None:
    state_file = GatedStateFile(tmp_path / "state.json")
    state = InnerState()
    state_file.gate.clear()
    state.last_seq = 1
    first = asyncio.create_task(state_file.save(state))

    async def writing() -> bool:
        return state_file.writing.is_set()

    await eventually(writing, "the first write to wait at the gate")
    waiting = []
    for seq in range(2, 12):
        state.last_seq = seq
        waiting.append(asyncio.create_task(state_file.save(state)))
    await asyncio.sleep(0)  # let them all queue up behind the first write
    state_file.gate.set()
    await asyncio.gather(first, *waiting)
    # One write for the first save, one for the ten that came while it was under way.
    assert state_file.writes == 2
    assert StateFile(state_file.path).load().last_seq == 11

    # A write of an older snapshot arriving late (its save was cancelled) is ignored.
    state_file.write(InnerState(last_seq=5).model_dump_json().encode(), generation=1)
    assert StateFile(state_file.path).load().last_seq == 11
