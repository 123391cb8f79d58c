"""A turn's live text: the deltas it streams (``agent.evt.delta``) and the text of its responses.

Deltas stop the moment the lease is in doubt, so a leader resumed after a pause shows nothing
more of an answer its successor gives, and the first waits for the read that takes the input on.
"""

import asyncio
from collections.abc import Callable

from delegate.contracts import topics
from delegate.contracts.messages import Delta
from delegate.runtime.bus import Bus


class TurnText:
    """Streams deltas for one turn and keeps the text of the responses that completed.

    A retried request starts a new ``attempt``: clients drop that attempt's earlier partial
    text; text from responses that already completed in this turn is sent again first.
    """

    def __init__(
        self, bus: Bus, turn_id: str, attempt: int, live: Callable[[], bool] = lambda: True,
        lease_read: "asyncio.Task[None] | None" = None,
    ) -> None:
        self.bus = bus
        self.live = live
        self.lease_read = lease_read  # the first delta waits for it (``Turn.lease_read``)
        self.turn_id = turn_id
        self.attempt = attempt
        self.index = 0
        self.committed = ""
        self.current = ""  # what the running response has streamed so far
        self.response_id: str | None = None  # the running response's id, once the server named it
        self._started = False

    def begin_response(self) -> None:
        self._started = False
        self.current = ""
        self.response_id = None

    def created(self, response_id: str) -> None:
        self.response_id = response_id

    def so_far(self) -> str:
        """Everything shown of this turn: completed responses and the running one's partial text."""
        return "\n\n".join(part for part in (self.committed, self.current) if part)

    async def delta(self, text: str) -> None:
        self.current += text
        if not self._started and self.committed:
            text = "\n\n" + text
        self._started = True
        await self._emit(text)

    def end_response(self, text: str) -> None:
        if text:
            self.committed = f"{self.committed}\n\n{text}" if self.committed else text

    async def restart(self) -> None:
        self.attempt += 1
        self.index = 0
        self._started = False
        self.current = ""
        if self.committed:
            await self._emit(self.committed)

    async def _emit(self, text: str) -> None:
        read = self.lease_read
        if read is not None:
            if not read.done():
                await asyncio.wait([read])
            if read.cancelled() or read.exception() is not None:
                return  # not ours: ``Turns._stream`` stops the request
            self.lease_read = None
        if not self.live():
            return  # the lease is in doubt: a successor may be streaming this turn already
        await self.bus.emit(
            topics.AGENT_DELTA, Delta(turn_id=self.turn_id, attempt=self.attempt, index=self.index, text=text)
        )
        self.index += 1
        # Yield after every delta: events that arrived in one read are parsed without yielding,
        # so a fast stream would hold the first delta back until the whole read is through (the
        # NATS client's flusher writes it only when we yield). In one host process the gateway
        # shares this loop: it forwards the first delta to the socket only once the rest of the
        # stream lets it run, so later deltas yield too (a real model's deltas arrive apart anyway).
        await asyncio.sleep(0)
