"""When run pictures are drawn: at a task's end, and when an activation's outcome is committed.

Both are drawn from the ledger's events of the run's span (the task's journal, the activation
span), so a picture shows what happened as recorded, whoever wrote it. Drawing runs off the
task loop (the D2 binary is a subprocess); the ``thoughtflow.artifact`` event that indexes the
picture goes through the ledger like everything else. Activations whose outcome was committed
while no leader listened (a restart) are drawn when the next term starts.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

from delegate.contracts import topics
from delegate.contracts.events import ActivationOutcome, Event, Fence, SpanClosed, SpanOpened, make_event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.runtime.ledger_client import LedgerClient

from .projection import TaskRecord
from .settings import Settings

log = logging.getLogger(__name__)

PAGE = 1000


class RunPictures:
    def __init__(self, settings: Settings, bus: Bus, fence: Callable[[], Fence | None]) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = LedgerClient(bus, "tasks")
        self.fence = fence
        self.drawn: set[str] = set()  # run ids with an artifact (this term)
        self._work: set[asyncio.Task[None]] = set()
        self.done = asyncio.Condition()  # notified after each picture (tests and the bench wait on it)

    async def start(self, term: Bus, service: object) -> None:
        await term.subscribe(topics.LEDGER_COMMITTED, self._on_committed)
        self._spawn(self._catch_up())

    def task_ended(self, record: TaskRecord) -> None:
        self._spawn(self._draw_span(record.id, record.id, "task"))

    async def _on_committed(self, event: Event) -> None:
        if event.span_id and event.is_kind(ActivationOutcome):
            self._spawn(self._draw_span(None, event.span_id, "activation"))

    def _spawn(self, coro: object) -> None:
        task = asyncio.ensure_future(coro)  # type: ignore[call-overload]
        self._work.add(task)
        task.add_done_callback(self._work.discard)

    async def _draw_span(self, run_id: str | None, span_id: str, run_type: str) -> None:
        from .thoughtflow.render import draw_run

        try:
            events = await self._scan(span_id=span_id)
            if run_id is None:
                opened = next((p for e in events if (p := e.payload_as(SpanOpened)) is not None), None)
                run_id = (opened.activation_id if opened else None) or span_id
            artifact = await draw_run(run_id, run_type, events, self.settings.runtime_data_dir)
            await self.ledger.publish(
                make_event(artifact, conversation_id=None, span_id=span_id, channel="inner"), self.fence())
            self.drawn.add(run_id)
            log.info("run picture for %s %s: %s", run_type, run_id, artifact.svg_path or artifact.error)
        except (BusUnavailable, RemoteError) as exc:
            log.warning("run picture for %s %s not drawn: %s", run_type, span_id, exc)
        except Exception:
            log.exception("run picture for %s %s failed", run_type, span_id)
        async with self.done:
            self.done.notify_all()

    async def _scan(self, **narrowed: object) -> list[Event]:
        """Every committed event of a span or of some kinds (``QueryRequest`` fields), in order."""
        events: list[Event] = []
        after = 0
        while True:
            reply = await self.ledger.query(QueryRequest(after_seq=after, limit=PAGE, **narrowed))
            events += reply.events
            if not reply.more or not reply.events:
                return events
            after = reply.events[-1].seq or after

    async def _catch_up(self) -> None:
        """Draw the activations and ended tasks whose picture no artifact names yet."""
        try:
            drawn = {e.span_id for e in await self._scan(kinds=["thoughtflow.artifact"])}
            for event in await self._scan(kinds=["activation.outcome", "span.closed"]):
                if event.span_id is None or event.span_id in drawn:
                    continue
                if event.is_kind(ActivationOutcome):
                    drawn.add(event.span_id)
                    await self._draw_span(None, event.span_id, "activation")
                elif event.channel == "inner" and (closed := event.payload_as(SpanClosed)) is not None \
                        and closed.summary in ("done", "failed", "cancelled"):
                    drawn.add(event.span_id)  # a task span (the only inner span closed with a state)
                    await self._draw_span(event.span_id, event.span_id, "task")
        except (BusUnavailable, RemoteError) as exc:
            log.warning("run pictures not caught up: %s", exc)

    async def close(self) -> None:
        for task in list(self._work):
            task.cancel()
        for task in list(self._work):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
