"""Writing a planned import: ``import.started``, one atomic batch per conversation, ``import.finished``.

One import at a time per gateway (they queue): each is a burst of thousands of events the
ledger must take in, and two at once would only interleave their conversations. A conversation
is a JetStream atomic batch, stored whole or not at all, so a bus failure halfway leaves only
whole conversations behind; the import is then marked failed, and a retry under the same
import id (the same ``Idempotency-Key``) writes the rest: its ids are the same, so what was
committed already is not written twice.

``Imports`` also remembers recent jobs in memory, so ``GET /api/import/{id}`` can answer
before the memory service has indexed the import's first event.
"""

import asyncio
import logging
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Literal

from delegate.contracts import topics
from delegate.contracts.events import Event, ImportLineError
from delegate.contracts.topics import Topic
from delegate.runtime.bus import BatchRefused, Bus, BusUnavailable

from .plan import Format, ImportPlan, refused

log = logging.getLogger(__name__)

LEDGER = topics.ledger_append("gateway")


class _Encoded(Topic[bytes]):
    """LEDGER for events the plan encoded already (``ConversationPlan.events``)."""

    def encode(self, msg: bytes) -> bytes:
        return msg


ENCODED = _Encoded(LEDGER.subject, Event)
BATCH_DEADLINE_S = 30.0
FINISH_DEADLINE_S = 10.0  # the failed end of an import whose bus just failed: a short last try
KEEP = 200  # finished jobs remembered


@dataclass
class Progress:
    import_id: str
    status: Literal["running", "done", "failed"] = "running"
    events: int = 0  # written (stored in the stream) so far
    total: int = 0
    conversations: int = 0
    errors: list[ImportLineError] = field(default_factory=list)
    message: str = ""


class Imports:
    def __init__(self) -> None:
        self.jobs: OrderedDict[str, Progress] = OrderedDict()
        self._lock = asyncio.Lock()

    def get(self, import_id: str) -> Progress | None:
        return self.jobs.get(import_id)

    def running(self, import_id: str) -> bool:
        job = self.jobs.get(import_id)
        return job is not None and job.status == "running"

    def start(self, bus: Bus, plan: ImportPlan) -> Progress:
        progress = self._remember(
            Progress(import_id=plan.import_id, total=plan.events, conversations=len(plan.conversations))
        )
        bus.spawn(self._write(bus, plan, progress))
        return progress

    def refuse(
        self, bus: Bus, import_id: str, fmt: Format, lines: int, errors: list[ImportLineError], message: str
    ) -> Progress:
        progress = self._remember(Progress(import_id=import_id, status="failed", errors=errors, message=message))
        bus.spawn(self._record_refusal(bus, import_id, refused(import_id, fmt, lines, errors, message)))
        return progress

    def _remember(self, progress: Progress) -> Progress:
        self.jobs[progress.import_id] = progress
        self.jobs.move_to_end(progress.import_id)
        while len(self.jobs) > KEEP:
            oldest = next(iter(self.jobs))
            if self.jobs[oldest].status == "running":
                break
            del self.jobs[oldest]
        return progress

    async def _record_refusal(self, bus: Bus, import_id: str, events: list[Event]) -> None:
        try:
            for event in events:
                await bus.publish(LEDGER, event, msg_id=event.id, deadline=BATCH_DEADLINE_S)
        except BusUnavailable as exc:
            log.warning("refused import %s: its record could not be written: %s", import_id, exc)

    async def _write(self, bus: Bus, plan: ImportPlan, progress: Progress) -> None:
        async with self._lock:
            written = 0
            try:
                started = plan.started()
                await bus.publish(LEDGER, started, msg_id=started.id, deadline=BATCH_DEADLINE_S)
                for conversation in plan.conversations:
                    ack = await bus.publish_batch(
                        ENCODED, conversation.events, msg_ids=conversation.ids, deadline=BATCH_DEADLINE_S
                    )
                    if ack.duplicate:
                        log.info("import %s: conversation %s was stored before", plan.import_id, conversation.key)
                    written += len(conversation.events)
                    progress.events = written
                finished = plan.finished("done", written)
                await bus.publish(LEDGER, finished, msg_id=finished.id, deadline=BATCH_DEADLINE_S)
            except (BusUnavailable, BatchRefused) as exc:
                progress.status, progress.message = "failed", f"stopped after {written} events: {exc}"
                log.warning("import %s failed after %d of %d events: %s", plan.import_id, written, plan.events, exc)
                await self._record_failure(bus, plan, written, progress.message)
                return
            except Exception:
                # A bug, not the bus: say so in the status rather than leave it running forever.
                log.exception("import %s crashed after %d events", plan.import_id, written)
                progress.status, progress.message = "failed", "the gateway failed while importing; see its log"
                await self._record_failure(bus, plan, written, progress.message)
                return
            progress.status = "done"
            log.info(
                "import %s written: %d events in %d conversations", plan.import_id, written, len(plan.conversations)
            )

    async def _record_failure(self, bus: Bus, plan: ImportPlan, written: int, message: str) -> None:
        finished = plan.finished("failed", written, message)
        try:
            await bus.publish(LEDGER, finished, msg_id=finished.id, deadline=FINISH_DEADLINE_S)
        except BusUnavailable:
            log.warning("import %s: its failure could not be recorded either", plan.import_id)
