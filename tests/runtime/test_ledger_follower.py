"""The shared ledger follower (``runtime.ledger_follower``) on a real nats-server: it catches up
on start, fills a gap of lost notifications from the ledger, asks the ledger when nothing comes,
and parks an event it cannot apply in the DEAD stream, passing over it. The ledger here is a
responder of ``ledger.cmd.query`` over a list: the follower's side is what is under test (the
inner plane's and memory's own tests run it against the real ledger)."""

import asyncio
from collections.abc import Sequence

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryReply, QueryRequest
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_follower import LedgerFollower

from .bus_support import event, until

pytestmark = [pytest.mark.integration]

SOURCE = "test-follower"


class Ledger:
    """The committed events, answering queries in pages as the ledger does."""

    def __init__(self) -> None:
        self.events: list[Event] = []

    def commit(self, text: str) -> Event:
        committed = event(text).with_seq(len(self.events) + 1)
        self.events.append(committed)
        return committed

    async def query(self, req: QueryRequest) -> QueryReply:
        after = [e for e in self.events if (e.seq or 0) > req.after_seq]
        return QueryReply(events=after[: req.limit], more=len(after) > req.limit, last_seq=len(self.events))


class Applied(LedgerFollower):
    def __init__(self, bus: Bus, stop: asyncio.Event) -> None:
        super().__init__(bus, stop, source=SOURCE, queue_max=4, resync_s=0.5, page=3)
        self.seen: list[str] = []
        self._last = 0

    @property
    def last_seq(self) -> int:
        return self._last

    def letter_id(self, event: Event) -> str:
        return f"letter-{event.id}"

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
        await until(lambda: follower.last_seq == 8)
        assert follower.seen[5:] == ["e6", "e7", "e8"]

        # A poison event is parked once, and the next one still applied.
        poison = ledger.commit("poison")
        after = ledger.commit("e10")
        await bus.emit(topics.LEDGER_COMMITTED, poison)
        await bus.emit(topics.LEDGER_COMMITTED, after)
        await until(lambda: follower.last_seq == 10)
        assert follower.seen[-1] == "e10" and "poison" not in follower.seen
        letter = await bus.js.get_last_msg("DEAD", f"dead.evt.{SOURCE}")
        assert letter.data is not None and poison.id.encode() in letter.data

        # Nothing announced at all: the quiet resync asks the ledger.
        ledger.commit("e11")
        await until(lambda: follower.last_seq == 11)
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
