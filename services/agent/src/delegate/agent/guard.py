"""The lease as the agent's parts see it: may live output still go out, is the lease still ours.

A part that is about to do what only the leader may (take an input on, acknowledge it, send
in a channel that is not fenced) asks ``confirm``; one that finds the lease gone steps the
term down at once (``lost``), so the consumer cannot spin on naks of the input and use up its
deliveries.
"""

import asyncio
import logging
from typing import TYPE_CHECKING

from delegate.runtime.bus import Retryable

from .outbound import NotLeading

if TYPE_CHECKING:
    from delegate.runtime.lease import Lease

log = logging.getLogger(__name__)


class Deposed(Retryable):
    """The lease is not (or no longer provably) ours: hand the input back to the next leader."""

    delay = 0.0


class LeaseGuard:
    def __init__(self, lease: "Lease | None" = None, lost: asyncio.Event | None = None) -> None:
        self.lease = lease  # None only in-process, where nothing else could lead
        # Set when a fresh read shows the lease is not ours: the term steps down at once.
        self.lost = lost if lost is not None else asyncio.Event()

    def live(self) -> bool:
        """Whether live output (deltas) may still go out: not once the lease is in doubt.

        A leader resumed after a pause would otherwise stream the rest of an answer that its
        successor is already giving again; the ledger refuses its events, but clients would
        see its deltas.
        """
        return self.lease is None or not self.lease.in_doubt()

    async def confirm(self, input_id: str | None = None, doing: str = "") -> None:
        """Raise ``Deposed`` (and step down) unless a fresh read shows the lease ours."""
        if self.lease is None or await self.lease.confirm():
            return
        if input_id is not None:
            log.warning("input %s: the lease is not ours any more; handing it back instead of %s", input_id, doing)
        self.lost.set()  # step down now: the next fetch would only nak it again
        raise Deposed("the lease is not ours")

    def step_down(self, exc: NotLeading) -> Deposed:
        """The outbox refused to send for a deposed leader: step down; raise what this returns."""
        self.lost.set()
        return Deposed(str(exc))
