"""One run of one task: model step, tool steps, model step, ... each journaled as it completes.

The run picks up where the journal ends (``journal.replay``), so the same code starts a new
task and resumes one after a crash. It stops at a terminal event (``task.finished`` or
``task.failed``), or when the service interrupts it (pause, cancel, losing the lease): an
interrupted step is not journaled and runs again on resume, except a side effect, which is
never interrupted halfway (``interrupt`` waits for it) and never repeated (``journal``).
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, Protocol

from delegate.contracts.ids import utcnow
from delegate.contracts.tasks import FailReason, step_key, task_data
from delegate.runtime.metering import Cause, Meter
from delegate.runtime.spend import Hold

from .journal import FunctionCall, Position, replay, unknown_output
from .model import Answer, Model, ModelFailed
from .projection import TaskRecord
from .prompts import EMPTY_ANSWER, first_message
from .settings import Settings
from .toolset import Outcome, Toolset, call_registry

log = logging.getLogger(__name__)

MAX_TEXT = 20_000  # characters of model text kept in a step event


class BrowserResult(Protocol):
    ok: bool
    output: str
    screenshot: str | None
    url: str | None
    refusals: list[str]


class TaskBrowser(Protocol):
    async def call(self, name: str, arguments: dict[str, Any]) -> BrowserResult: ...


Record = Callable[[str, dict[str, Any]], Awaitable[None]]  # (kind, data): journal one event
OpenBrowser = Callable[[str, Path], AbstractAsyncContextManager[TaskBrowser]]
LoadTools = Callable[[TaskRecord], Awaitable[Toolset]]


class Ended(Exception):
    """The run reached a terminal event."""


def workdir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class TaskRun:
    def __init__(
        self,
        record: TaskRecord,
        *,
        settings: Settings,
        model: Model,
        journal: Record,
        open_browser: OpenBrowser,
        load_tools: LoadTools,
        bus: Any,
        meter: Meter,
        gate: Callable[[], Hold | None] = lambda: None,
    ) -> None:
        self.record = record
        self.settings = settings
        self.model = model
        self.journal = journal
        self.open_browser = open_browser
        self.load_tools = load_tools
        self.bus = bus
        self.meter = meter
        self.gate = gate  # the owner's spend line: asked before every model step
        self.workdir = settings.workdirs / record.id
        self.critical = False  # inside a side effect: an interrupt waits for the step to end
        self.want_stop = False

    async def run(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True, mode=0o700)
        await self.journal("task.started", task_data(attempt=self.record.attempts + 1))
        toolset = await self.load_tools(self.record)
        pos = replay(self.record.events)
        for intent in pos.unanswered_intents():
            # It may have happened: never run it again, tell the owner and the model.
            await self.journal("task.step.unknown", task_data(
                step=intent.step, call_id=intent.call.call_id, name=intent.call.name, key=intent.key,
                reason="the runner stopped between this side effect's intent and its result",
            ))
            pos.outputs[intent.call.call_id] = unknown_output(intent.call.name)
        try:
            async with self.open_browser(self.record.id, self.workdir) as browser:
                await self._loop(pos, toolset, browser)
        except Ended:
            return

    async def _loop(self, pos: Position, toolset: Toolset, browser: TaskBrowser) -> None:
        while not self.want_stop:
            self._check_budgets(pos)
            if pos.failures >= self.settings.tasks_max_failures:
                await self._fail("failures", f"{pos.failures} failed actions or evaluations in a row")
            if pos.pending:
                await self._tool_step(pos, pos.pending[0], toolset, browser)
            else:
                hold = self.gate()
                if hold is not None:
                    raise _Held(hold)
                await self._model_step(pos, toolset)

    # ---- budgets ---------------------------------------------------------------------------

    def _remaining_seconds(self) -> float:
        return self.record.budget.seconds - self.record.elapsed(utcnow())

    def _check_budgets(self, pos: Position) -> None:
        budget = self.record.budget
        if self.record.steps >= budget.steps:
            raise _Budget("steps", f"the step budget ({budget.steps}) is used up")
        if self.record.tokens >= budget.tokens:
            raise _Budget("tokens", f"the token budget ({budget.tokens}) is used up ({self.record.tokens})")
        if self._remaining_seconds() <= 0:
            raise _Budget("seconds", f"the time budget ({budget.seconds:.0f} s) is used up")
        limit = self.settings.tasks_workdir_max_mb * 1024 * 1024
        if self.workdir.exists() and (size := workdir_bytes(self.workdir)) > limit:
            raise _Budget("workdir", f"the workdir holds {size} bytes, over {limit:.0f}")

    async def _fail(self, reason: FailReason, error: str) -> None:
        await self.journal("task.failed", task_data(reason=reason, error=error))
        raise Ended

    # ---- steps -----------------------------------------------------------------------------

    async def _model_step(self, pos: Position, toolset: Toolset) -> None:
        if pos.head is None:
            items: list[dict[str, Any]] = [{
                "role": "user", "content": first_message(self.record.goal, self.record.start_urls),
            }]
        else:
            items = [{"type": "function_call_output", "call_id": c.call_id, "output": pos.outputs.get(c.call_id, "")}
                     for c in pos.calls]
            if pos.nudge:
                items.append({"role": "user", "content": pos.nudge})
        try:
            async with asyncio.timeout(max(self._remaining_seconds(), 0.001)):
                answer = await self.model.step(
                    input_items=items, previous=pos.head, tools=toolset.specs(), meter=self.meter,
                    cause=Cause("task_step", "inner", self.record.id, span_id=self.record.id),
                )
        except TimeoutError:
            raise _Budget("seconds", f"the time budget ({self.record.budget.seconds:.0f} s) ran out") from None
        except ModelFailed as exc:
            # Not a completed step: nothing is journaled, the same call is tried again.
            pos.failures += 1
            log.warning("task %s: model step failed (%d in a row): %s", self.record.id, pos.failures, exc)
            if pos.failures >= self.settings.tasks_max_failures:
                await self._fail("error", f"the model failed {pos.failures} times in a row: {exc}")
            await asyncio.sleep(min(2.0 ** pos.failures, 30.0))
            return
        await self._journal_model(pos, answer)

    async def _journal_model(self, pos: Position, answer: Answer) -> None:
        step = pos.next_step
        failed = None if answer.calls or answer.text.strip() else "an empty answer"
        bad = [c.name for c in answer.calls if c.parsed() is None]
        if bad:
            failed = f"arguments that are not a JSON object for {', '.join(bad)}"
        await self.journal("task.step", task_data(
            step=step, type="model", response_id=answer.response_id,
            calls=[{"call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in answer.calls],
            text=answer.text[:MAX_TEXT], tokens=answer.tokens, failed=failed,
            nudge=EMPTY_ANSWER if failed == "an empty answer" else None,
        ))
        pos.next_step = step + 1
        pos.head, pos.calls, pos.outputs, pos.intents = answer.response_id, answer.calls, {}, {}
        pos.nudge = EMPTY_ANSWER if failed == "an empty answer" else None
        pos.model_steps += 1
        if failed:
            pos.failures += 1
            for call in answer.calls:
                if call.parsed() is None:
                    pos.outputs[call.call_id] = "Refused: the arguments are not a JSON object"
            return
        if not answer.calls:
            await self.journal("task.finished", task_data(answer=answer.text[:MAX_TEXT]))
            raise Ended

    async def _tool_step(self, pos: Position, call: FunctionCall, toolset: Toolset, browser: TaskBrowser) -> None:
        step = pos.next_step
        arguments = call.parsed() or {}
        refusal = toolset.refusal(call.name)
        if refusal is not None:
            await self.journal("task.refused", task_data(
                step=step, call_id=call.call_id, name=call.name, arguments=arguments, reason=refusal))
            pos.next_step, pos.failures = step + 1, pos.failures + 1
            pos.outputs[call.call_id] = f"Refused: {refusal}"
            log.warning("task %s: refused %s: %s", self.record.id, call.name, refusal)
            return
        side_effect = toolset.side_effect(call.name)
        started = time.perf_counter()
        screenshot: str | None = None
        refusals: list[str] = []
        url: str | None = None
        if call.name in toolset.browser_names:
            try:
                async with asyncio.timeout(max(self._remaining_seconds(), 0.001)):
                    result = await browser.call(call.name, arguments)
            except TimeoutError:
                raise _Budget("seconds", f"the time budget ({self.record.budget.seconds:.0f} s) ran out") from None
            outcome = Outcome(result.ok, result.output)
            screenshot, refusals, url = result.screenshot, list(result.refusals), result.url
        elif side_effect:
            key = step_key(self.record.id, step)
            await self.journal("task.step.intent", task_data(
                step=step, call_id=call.call_id, name=call.name, arguments=arguments, key=key))
            self.critical = True
            try:
                outcome = await call_registry(self.bus, call.name, arguments, call_id=key, task_id=self.record.id,
                                              timeout=300.0)
            finally:
                self.critical = False
        else:
            outcome = await call_registry(self.bus, call.name, arguments, call_id=call.call_id,
                                          task_id=self.record.id, timeout=300.0)
        ms = round((time.perf_counter() - started) * 1000, 1)
        await self.journal("task.step", task_data(
            step=step, type="tool", call_id=call.call_id, name=call.name, arguments=arguments, ok=outcome.ok,
            output=outcome.output, ms=ms, side_effect=side_effect, url=url, refusals=refusals or None,
        ))
        if screenshot:
            await self.journal("task.screenshot", task_data(step=step, file=screenshot, url=url))
        pos.next_step = step + 1
        pos.outputs[call.call_id] = outcome.output
        pos.failures = 0 if outcome.ok else pos.failures + 1


class _Budget(Exception):
    def __init__(self, reason: FailReason, error: str) -> None:
        super().__init__(error)
        self.reason: FailReason = reason
        self.error = error


class _Held(Exception):
    def __init__(self, hold: Hold) -> None:
        super().__init__(hold.detail)
        self.hold = hold


async def run_task(run: TaskRun) -> None:
    """``run.run()``, turning a spent budget into the task's failure, and the owner's spend line
    into a pause (``by: budget``) that the service lifts when the budget allows."""
    try:
        await run.run()
    except _Budget as exc:
        await run.journal("task.failed", task_data(reason=exc.reason, error=exc.error))
    except _Held as exc:
        hold = exc.hold
        log.info("task %s paused at the spend line: %s", run.record.id, hold.detail)
        await run.journal("task.paused", task_data(by="budget", reason=hold.reason, detail=hold.detail,
                                                    until=hold.until.isoformat()))

