"""The ledger's record of one leadership term: ``session.started`` when the lease is won,
``session.ended`` when it is given up.

The lease itself lives in a KV bucket whose entries expire, so once a holder dies nothing there
remains to say who held it before (a standby's ``create`` only succeeds after the old entry is
gone). The ledger keeps that history instead: its resume state names the agent session still
open, and a new holder that finds one open names it in ``supersedes``; the ledger then closes it
as superseded. So a killed holder's session is closed by its successor, a clean one by itself.
"""

import asyncio
import logging

from delegate.contracts.events import Event, SessionEnded, SessionEndReason, SessionStarted, SessionType, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import SessionInfo
from delegate.runtime.bus import BusUnavailable

from .ledger import Ledger

log = logging.getLogger(__name__)


class LeaseSession:
    def __init__(self, ledger: Ledger, holder: str, session_type: SessionType = "agent") -> None:
        self.ledger = ledger
        self.holder = holder
        self.type: SessionType = session_type
        self.id = new_id()
        self._started: Event | None = None
        self._ended = False

    async def start(self, open_session: SessionInfo | None) -> None:
        """Record the start, superseding ``open_session`` (the ledger's open one, if any).

        Built once: a retry after a failed publish sends the very same event, so the ledger
        stores it once and it keeps naming the predecessor the first attempt saw.
        """
        if self._started is None:
            previous = open_session.id if open_session is not None and open_session.id != self.id else None
            self._started = make_event(
                SessionStarted(session_id=self.id, type=self.type, holder=self.holder, supersedes=previous),
                conversation_id=None,
                span_id=None,
                channel="inner",
            )
        await self.ledger.append(self._started)
        supersedes = self._started.payload.get("supersedes")
        log.info("session %s started%s", self.id, f", superseding {supersedes}" if supersedes else "")

    async def end(self, reason: SessionEndReason, *, timeout: float) -> None:
        """Record the end, once, if a start was sent; give up after ``timeout`` seconds.

        Best effort by design: a holder that cannot reach the bus any more is superseded by the
        next one instead, which closes its session just the same.
        """
        if self._started is None or self._ended:
            return
        self._ended = True
        event = make_event(
            SessionEnded(session_id=self.id, reason=reason), conversation_id=None, span_id=None, channel="inner"
        )
        try:
            await asyncio.wait_for(self.ledger.append(event), timeout)
        except (BusUnavailable, TimeoutError) as exc:
            log.warning("session %s: its end (%s) was not recorded, the next holder supersedes it: %r",
                        self.id, reason, exc)
            return
        log.info("session %s ended (%s)", self.id, reason)
