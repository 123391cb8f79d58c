"""The tasks service while it leads: the book of tasks, the commands, and the runs.

Only the lease holder runs tasks and answers commands (a standby waits), and everything it
writes carries its term's fence, so a runner that was paused or cut off cannot journal a step
after its successor took the task over. Task state is the ledger's: the book is rebuilt from
it when a term starts, then kept current by applying each event this process publishes.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Event, Fence, SpanClosed, SpanOpened, TaskEvent, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import QueryRequest
from delegate.contracts.signals import TaskFailed, TaskFailedPayload, TaskFinished, TaskFinishedPayload
from delegate.contracts.tasks import (
    TASK_KINDS,
    TaskBudget,
    TaskControl,
    TaskCreate,
    TaskGet,
    TaskList,
    TaskListReply,
    TaskReply,
    task_data,
)
from delegate.runtime.bus import Bus, BusUnavailable, DomainError
from delegate.runtime.ledger_client import LedgerClient
from delegate.runtime.metering import Meter

from .model import Model
from .projection import TaskBook, TaskRecord
from .runner import TaskBrowser, TaskRun, run_task
from .settings import Settings
from .spend_gate import SpendGate
from .toolset import Toolset, load_toolset

log = logging.getLogger(__name__)

SERVICE = "tasks"
PAGE = 1000
RETRY_AFTER_S = 2.0  # a run that ended on an error (the bus away) is picked up again after this


class BrowserProvider:
    """The browser tool the runs share (one Chromium, one context per task)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._browser: Any = None

    def specs(self) -> list[dict[str, Any]]:
        from .browser import tool_specs

        specs: list[dict[str, Any]] = tool_specs()
        return specs

    @asynccontextmanager
    async def for_task(self, task_id: str, workdir: Path) -> AsyncIterator[TaskBrowser]:
        if self._browser is None:
            from .browser import Browser

            self._browser = Browser.from_settings(self.settings)
            await self._browser.start()
        async with self._browser.for_task(task_id, workdir) as task_browser:
            yield task_browser

    async def close(self) -> None:
        if self._browser is not None:
            await self._browser.close()
            self._browser = None


class TasksService:
    def __init__(self, settings: Settings, bus: Bus, fence: Callable[[], Fence | None],
                 on_terminal: Callable[[TaskRecord], None] = lambda record: None) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = LedgerClient(bus, SERVICE)
        self.fence = fence
        self.on_terminal = on_terminal
        self.book = TaskBook()
        self.model = Model(settings)
        self.meter = Meter.for_settings(settings, self.publish)  # every step's usage, under the fence
        self.browser = BrowserProvider(settings)
        self.runs: dict[str, tuple[TaskRun, asyncio.Task[None]]] = {}
        self.holding: set[str] = set()  # tasks a pause or cancel is taking over
        self.ready = False
        self.closing = False
        self._create_lock = asyncio.Lock()
        # BUDGET_*: a task's model step waits at the owner's spend line (paused by "budget").
        self.spend = SpendGate(settings, bus, self.ledger, self._budget_changed)
        self._resuming: set[asyncio.Task[None]] = set()

    # ---- the book --------------------------------------------------------------------------

    async def restore(self) -> None:
        """Rebuild the book from the ledger (call after ``wait_caught_up``)."""
        book = TaskBook()
        after = 0
        while True:
            reply = await self.ledger.query(QueryRequest(after_seq=after, kinds=list(TASK_KINDS), limit=PAGE))
            for event in reply.events:
                book.apply(event)
            if not reply.events or not reply.more:
                break
            after = reply.events[-1].seq or after
        self.book = book
        await self.spend.start()
        self.ready = True
        self._budget_changed()  # a budget raised (or a new period) while we were away
        log.info("restored %d tasks (%d not finished)", len(book.tasks),
                 sum(1 for r in book.tasks.values() if not r.terminal))

    async def publish(self, event: Event) -> None:
        await self.ledger.publish(event, self.fence())

    async def record(self, task_id: str, kind: str, data: dict[str, Any]) -> Event:
        """Journal one task event: durable once this returns, and applied to the book."""
        event = make_event(TaskEvent(task_id=task_id, data=data), kind=kind, conversation_id=None,
                           span_id=task_id, channel="inner")
        await self.publish(event)
        self.book.apply(event)
        return event

    def _get(self, task_id: str) -> TaskRecord:
        record = self.book.tasks.get(task_id)
        if record is None:
            raise DomainError("not_found", f"no task {task_id}")
        return record

    # ---- commands --------------------------------------------------------------------------

    async def on_create(self, req: TaskCreate) -> TaskReply:
        async with self._create_lock:  # one at a time: a retried create must find the first
            if req.idempotency_key and req.idempotency_key in self.book.by_key:
                return TaskReply(task=self.book.tasks[self.book.by_key[req.idempotency_key]].summary())
            task_id = new_id()
            budget = req.budget.over(self.default_budget()) if req.budget else self.default_budget()
            await self.publish(make_event(SpanOpened(type="task"), conversation_id=None, span_id=task_id,
                                          channel="inner"))
            await self.record(task_id, "task.created", task_data(
                goal=req.goal, start_urls=req.start_urls, budget=budget.model_dump(), allow_tools=req.allow_tools,
                source=req.source, idempotency_key=req.idempotency_key,
            ))
        self.schedule()
        log.info("task %s created (%s): %s", task_id, req.source, req.goal[:80])
        return TaskReply(task=self._get(task_id).summary())

    def default_budget(self) -> TaskBudget:
        s = self.settings
        return TaskBudget(steps=s.tasks_max_steps, seconds=s.tasks_max_seconds, tokens=s.tasks_max_tokens)

    async def on_list(self, req: TaskList) -> TaskListReply:
        records = self.book.newest_first()
        if req.states:
            records = [r for r in records if r.state in req.states]
        return TaskListReply(tasks=[r.summary() for r in records[: req.limit]])

    async def on_get(self, req: TaskGet) -> TaskReply:
        return TaskReply(task=self._get(req.id).summary())

    async def on_control(self, req: TaskControl) -> TaskReply:
        record = self._get(req.id)
        self.holding.add(record.id)  # not started again while its interrupted run winds down
        try:
            match req.action:
                case "pause":
                    if record.state not in ("queued", "running"):
                        raise DomainError(
                            "conflict", f"task {record.id} is {record.state}: only a queued or running task pauses")
                    await self.interrupt(record.id)
                    await self.record(record.id, "task.paused", task_data(by=req.by))
                case "resume":
                    if record.state != "paused":
                        raise DomainError("conflict", f"task {record.id} is {record.state}: only a paused task resumes")
                    await self.record(record.id, "task.resumed", task_data(by=req.by))
                case "cancel":
                    if record.terminal:
                        raise DomainError("conflict", f"task {record.id} is {record.state} already")
                    await self.interrupt(record.id)
                    await self.record(record.id, "task.cancelled", task_data(by=req.by))
                    await self._ended(record)
        finally:
            self.holding.discard(record.id)
        self.schedule()
        return TaskReply(task=record.summary())

    # ---- runs ------------------------------------------------------------------------------

    def schedule(self) -> None:
        """Start what may run, oldest first, up to TASKS_MAX_CONCURRENT at once."""
        if not self.ready or self.closing:
            return
        waiting = sorted((r for r in self.book.tasks.values() if r.state in ("queued", "running")
                          and r.id not in self.runs and r.id not in self.holding), key=lambda r: (r.created_at, r.id))
        for record in waiting[: max(self.settings.tasks_max_concurrent - len(self.runs), 0)]:
            run = TaskRun(
                record, settings=self.settings, model=self.model, journal=self._journal_of(record.id),
                open_browser=self.browser.for_task, load_tools=self._tools, bus=self.bus, meter=self.meter,
                gate=self.spend.hold,
            )
            self.runs[record.id] = (run, asyncio.create_task(self._drive(run), name=f"task-{record.id}"))

    def _budget_changed(self) -> None:
        """Spend changed or a hold ended: resume what the budget paused once nothing holds it."""
        if not self.ready or self.closing or self.spend.hold() is not None:
            return
        if any(r.paused_by == "budget" for r in self.book.tasks.values()):
            task = asyncio.create_task(self._resume_budget_paused(), name="tasks-budget-resume")
            self._resuming.add(task)
            task.add_done_callback(self._resuming.discard)

    async def _resume_budget_paused(self) -> None:
        for record in [r for r in self.book.tasks.values() if r.paused_by == "budget" and r.state == "paused"]:
            if self.spend.hold() is not None or record.id in self.holding:
                break
            with contextlib.suppress(BusUnavailable):
                await self.record(record.id, "task.resumed", task_data(by="budget"))
                log.info("task %s resumed: the budget allows it again", record.id)
        self.schedule()

    def _journal_of(self, task_id: str) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
        async def journal(kind: str, data: dict[str, Any]) -> None:
            await self.record(task_id, kind, data)

        return journal

    async def _tools(self, record: TaskRecord) -> Toolset:
        return await load_toolset(self.bus, self.browser.specs(), record.allow_tools)

    async def _drive(self, run: TaskRun) -> None:
        record = run.record
        retry = False
        try:
            await run_task(run)
        except asyncio.CancelledError:
            log.info("task %s interrupted at step %d", record.id, record.steps)
        except BusUnavailable as exc:
            log.warning("task %s: the bus went away (%s); it is picked up again", record.id, exc)
            retry = True
        except Exception as exc:
            log.exception("task %s: the run failed", record.id)
            with contextlib.suppress(Exception):
                await self.record(record.id, "task.failed", task_data(reason="error", error=repr(exc)[:2000]))
        finally:
            self.runs.pop(record.id, None)
        if record.terminal and record.state != "cancelled":
            await self._ended(record)
        if retry:
            await asyncio.sleep(RETRY_AFTER_S)
        self.schedule()

    async def interrupt(self, task_id: str) -> None:
        """Stop a task's run at once, or after its side effect in flight (never halfway through one)."""
        entry = self.runs.get(task_id)
        if entry is None:
            return
        run, task = entry
        run.want_stop = True
        if not run.critical:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(task) if run.critical else await task

    async def _ended(self, record: TaskRecord) -> None:
        """A task reached its end: close its span, tell the inner plane, draw its run."""
        with contextlib.suppress(BusUnavailable):
            await self.publish(make_event(SpanClosed(reason="completed", summary=record.state), conversation_id=None,
                                          span_id=record.id, channel="inner", id=f"{record.id}-closed"))
            signal = self._end_signal(record)
            if signal is not None:
                await self.bus.publish(topics.INNER_SIGNAL, signal, msg_id=signal.id)
        self.on_terminal(record)

    @staticmethod
    def _end_signal(record: TaskRecord) -> TaskFinished | TaskFailed | None:
        """What the inner plane hears of a task's end (its id is the task's: raised once)."""
        common: dict[str, Any] = {"id": f"{record.id}-end", "source": SERVICE, "dedup_key": f"task:{record.id}"}
        goal = record.goal[:2000]
        if record.state == "done":
            return TaskFinished(**common, payload=TaskFinishedPayload(task_id=record.id, goal=goal,
                                                                      summary=(record.answer or "")[:2000]))
        if record.state == "failed":
            return TaskFailed(**common, payload=TaskFailedPayload(task_id=record.id, goal=goal,
                                                                  error=(record.error or "")[:2000]))
        return None

    async def close(self) -> None:
        """Stop every run (each resumes from its journal under the next leader)."""
        self.closing = True
        await self.spend.close()
        for task_id in list(self.runs):
            await self.interrupt(task_id)
        await self.browser.close()
        await self.model.close()
