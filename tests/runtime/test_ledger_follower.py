"""The shared ledger follower (``runtime.ledger_follower``) on a real nats-server: it catches up
on start, fills a gap of lost notifications from the ledger, asks the ledger when nothing comes,
and parks an event it cannot apply in the DEAD stream, passing over it. The ledger here is a
responder of ``ledger.cmd.query`` over a list: the follower's side is what is under test (the
inner plane's and memory's own tests run it against the real ledger). A ``from_head`` follower (the
gateway's fan-out) starts at the ledger's newest event and gives up a gap the ledger leaves
unfilled, going on after it."""

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryReply, QueryRequest
from delegate.runtime.bus import Bus, DomainError
from delegate.runtime.ledger_follower import LedgerFollower
from tests.support.waiting import eventually

from .bus_support import event

pytestmark = [pytest.mark.integration]

SOURCE = "test-follower"


class Ledger:
    """The committed events, answering queries in pages as the ledger does."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.silent = False  # every query is answered with an error

    def commit(self, text: str) -> Event:
        committed = event(text).with_seq(len(self.events) + 1)
        self.events.append(committed)
        return committed

    async def query(self, req: QueryRequest) -> QueryReply:
        if self.silent:
            raise DomainError("unavailable", "the ledger is not answering")
        after = [e for e in self.events if (e.seq or 0) > req.after_seq]
        return QueryReply(events=after[: req.limit], more=len(after) > req.limit, last_seq=len(self.events))


class Applied(LedgerFollower):
    def __init__(self, bus: Bus, stop: asyncio.Event, *, resync_s: float = 0.5, **options: Any) -> None:
        super().__init__(bus, stop, source=SOURCE, queue_max=4, resync_s=resync_s, page=3, **options)
        self.seen: list[str] = []
        self._last = 0
        self.gaps_lost = 0

    @property
    def last_seq(self) -> int:
        return self._last

    def letter_id(self, event: Event) -> str:
        return f"letter-{event.id}"

    def start_at(self, seq: int) -> None:
        self._last = seq

    async def on_gap_lost(self) -> None:
        self.gaps_lost += 1

    async def apply_run(self, events: Sequence[Event]) -> None:
        for e in events:
            assert e.seq == self._last + 1, "a run is consecutive, right after last_seq"
            text = e.payload["text"]
            if text == "poison":
                await self.dead_letter(e, "cannot apply")
            else:
                self.seen.append(text)
            self._last = e.seq


async def test_catch_up_gaps_quiet_resync_and_a_parked_event(bus: Bus) -> None:
    ledger = Ledger()
    await bus.serve(topics.LEDGER_QUERY, ledger.query)
    for n in range(1, 6):
        ledger.commit(f"e{n}")  # committed before the follower starts: read in pages of 3
    stop = asyncio.Event()
    follower = Applied(bus, stop)
    await follower.start()
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.caught_up.wait(), 10)
        assert follower.seen == ["e1", "e2", "e3", "e4", "e5"] and follower.ledger_seq == 5

        # Live, with the notification of e7 lost: e8 shows the gap, the ledger fills it.
        e6, e7, e8 = ledger.commit("e6"), ledger.commit("e7"), ledger.commit("e8")
        await bus.emit(topics.LEDGER_COMMITTED, e6)
        await bus.emit(topics.LEDGER_COMMITTED, e8)
        del e7
        await eventually(lambda: follower.last_seq == 8, "the follower at seq 8")
        assert follower.seen[5:] == ["e6", "e7", "e8"]

        # A poison event is parked once, and the next one still applied.
        poison = ledger.commit("poison")
        after = ledger.commit("e10")
        await bus.emit(topics.LEDGER_COMMITTED, poison)
        await bus.emit(topics.LEDGER_COMMITTED, after)
        await eventually(lambda: follower.last_seq == 10, "the follower at seq 10")
        assert follower.seen[-1] == "e10" and "poison" not in follower.seen
        letter = await bus.js.get_last_msg("DEAD", f"dead.evt.{SOURCE}")
        assert letter.data is not None and poison.id.encode() in letter.data

        # Nothing announced at all: the quiet resync asks the ledger.
        ledger.commit("e11")
        await eventually(lambda: follower.last_seq == 11, "the follower at seq 11")
        assert follower.seen[-1] == "e11"
        assert follower.high_water <= 4  # the live queue stays bounded
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def test_a_follower_stopped_before_catching_up_never_says_it_caught_up(bus: Bus) -> None:
    # No ledger answers: the catch-up retries until stopped, and caught_up stays unset, so
    # nothing that waits for it starts on a half-read ledger.
    stop = asyncio.Event()
    follower = Applied(bus, stop)
    await follower.start()
    task = asyncio.create_task(follower.run())
    stop.set()
    await asyncio.wait_for(task, 15)
    assert not follower.caught_up.is_set()


async def test_a_follower_from_the_head_gives_up_a_gap_the_ledger_leaves_unfilled(bus: Bus) -> None:
    ledger = Ledger()
    await bus.serve(topics.LEDGER_QUERY, ledger.query)
    for n in range(1, 6):
        ledger.commit(f"old {n}")  # before it starts: not its business
    stop = asyncio.Event()
    # No quiet-spell check meanwhile: only the gap makes it ask the ledger.
    follower = Applied(bus, stop, resync_s=3600, from_head=True, gap_give_up_s=0.5)
    await follower.start()
    task = asyncio.create_task(follower.run())
    try:
        await asyncio.wait_for(follower.caught_up.wait(), 10)
        assert follower.last_seq == 5 and follower.seen == []

        e6 = ledger.commit("e6")
        await bus.emit(topics.LEDGER_COMMITTED, e6)
        await eventually(lambda: follower.last_seq == 6, "the follower at seq 6")

        # e7's notification is lost and the ledger stops answering: after gap_give_up_s the gap
        # is given up (said once), and e8 and what follows still go through.
        ledger.silent = True
        ledger.commit("e7")
        e8 = ledger.commit("e8")
        await bus.emit(topics.LEDGER_COMMITTED, e8)
        await eventually(lambda: follower.last_seq == 8, "the follower at seq 8")
        assert follower.seen == ["e6", "e8"] and follower.gaps_lost == 1
        ledger.silent = False
        e9 = ledger.commit("e9")
        await bus.emit(topics.LEDGER_COMMITTED, e9)
        await eventually(lambda: follower.last_seq == 9, "the follower at seq 9")
        assert follower.seen == ["e6", "e8", "e9"] and follower.gaps_lost == 1
    finally:
        task.cancel()  # its live wait is an hour long: stop is only looked at between waits
        await asyncio.gather(task, return_exceptions=True)
