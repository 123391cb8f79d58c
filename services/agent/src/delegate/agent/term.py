"""The ledger's record of one leadership term: ``term.started`` when the lease is won,
``term.ended`` when it is given up.

The lease itself lives in a KV bucket whose entries expire, so once a holder dies nothing there
remains to say who held it before (a standby's ``create`` only succeeds after the old entry is
gone). The ledger keeps that history instead: its resume state names the agent term still
open, and a new holder that finds one open names it in ``supersedes``; the ledger then closes it
as superseded. So a killed holder's term is closed by its successor, a clean one by itself.

Both events go through the agent's ``Ledger``, so they carry the term's fence: the start is
what raises the ledger's highest token for the singleton, and from then on a deposed
predecessor's events are refused.
"""

import asyncio
import logging

from delegate.contracts.events import Event, TermEnded, TermEndReason, TermStarted, TermType, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import TermInfo
from delegate.runtime.bus import BusUnavailable

from .ledger import Ledger

log = logging.getLogger(__name__)


class LeadershipTerm:
    def __init__(self, ledger: Ledger, holder: str, term_type: TermType = "agent") -> None:
        self.ledger = ledger
        self.holder = holder
        self.type: TermType = term_type
        self.id = new_id()
        self._started: Event | None = None
        self._ended = False

    async def start(self, open_term: TermInfo | None) -> None:
        """Record the start, superseding ``open_term`` (the ledger's open one, if any).

        Built once: a retry after a failed publish sends the very same event, so the ledger
        stores it once and it keeps naming the predecessor the first attempt saw.
        """
        if self._started is None:
            previous = open_term.id if open_term is not None and open_term.id != self.id else None
            self._started = make_event(
                TermStarted(term_id=self.id, type=self.type, holder=self.holder, supersedes=previous),
                conversation_id=None,
                span_id=None,
                channel="inner",
            )
        await self.ledger.append(self._started)
        supersedes = self._started.typed(TermStarted).supersedes
        log.info("term %s started%s", self.id, f", superseding {supersedes}" if supersedes else "")

    async def end(self, reason: TermEndReason, *, timeout: float) -> None:
        """Record the end, once, if a start was sent; give up after ``timeout`` seconds.

        Best effort by design: a holder that cannot reach the bus any more (or was deposed,
        so the ledger refuses its fenced end) is superseded by the next one instead, which
        closes its term just the same.
        """
        if self._started is None or self._ended:
            return
        self._ended = True
        if not self.ledger.bus.nc.is_connected:
            # The publish would only wait out ``timeout`` (its retries need NATS back first).
            log.warning("term %s: its end (%s) was not recorded (not connected to NATS), the next"
                        " holder supersedes it", self.id, reason)
            return
        event = make_event(
            TermEnded(term_id=self.id, reason=reason), conversation_id=None, span_id=None, channel="inner"
        )
        try:
            await asyncio.wait_for(self.ledger.append(event), timeout)
        except (BusUnavailable, TimeoutError) as exc:
            log.warning("term %s: its end (%s) was not recorded, the next holder supersedes it: %r",
                        self.id, reason, exc)
            return
        log.info("term %s: its end (%s) was published", self.id, reason)
