"""What the service knows of each task: a projection of its ``task.*`` events, nothing else.

The tasks service is the only producer of task events, so it applies each one here as soon
as JetStream has it (durable), and rebuilds the whole book from the ledger when it becomes
the leader (after the ledger caught up, so a dead predecessor's last events are in it).
Each record also keeps its task's events in order: the journal a run resumes from.
"""

from dataclasses import dataclass, field
from datetime import datetime

from delegate.contracts.events import Event, TaskEvent
from delegate.contracts.tasks import TERMINAL_STATES, FailReason, TaskBudget, TaskState, TaskSummary


@dataclass
class TaskRecord:
    id: str
    goal: str
    created_at: datetime
    updated_at: datetime
    state: TaskState = "queued"
    source: str = "owner"
    start_urls: list[str] = field(default_factory=list)
    budget: TaskBudget = field(default_factory=TaskBudget)
    allow_tools: list[str] = field(default_factory=list)
    steps: int = 0
    tokens: int = 0
    answer: str | None = None
    error: str | None = None
    fail_reason: FailReason | None = None
    screenshots: list[str] = field(default_factory=list)
    unknown_steps: list[int] = field(default_factory=list)
    refused: int = 0
    attempts: int = 0  # task.started events: the first run and each pick-up after a restart
    ran_seconds: float = 0.0  # wall clock spent running, in closed segments
    running_since: datetime | None = None  # the open segment's start
    idempotency_key: str | None = None
    paused_by: str | None = None  # owner | agent | budget (the owner's spend line), while paused
    events: list[Event] = field(default_factory=list)  # the journal, in order

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL_STATES

    def elapsed(self, now: datetime) -> float:
        """Seconds spent running so far, the open segment included."""
        open_segment = (now - self.running_since).total_seconds() if self.running_since is not None else 0.0
        return self.ran_seconds + max(open_segment, 0.0)

    def summary(self) -> TaskSummary:
        return TaskSummary(
            id=self.id, goal=self.goal, state=self.state, created_at=self.created_at, updated_at=self.updated_at,
            source="agent" if self.source == "agent" else "owner", start_urls=self.start_urls, budget=self.budget,
            allow_tools=self.allow_tools, steps=self.steps, tokens=self.tokens, answer=self.answer,
            error=self.error, fail_reason=self.fail_reason, screenshots=self.screenshots,
            unknown_steps=self.unknown_steps, refused=self.refused, run_id=self.id,
            paused_by=self.paused_by if self.state == "paused" else None,
        )

    def _close_segment(self, at: datetime) -> None:
        if self.running_since is not None:
            self.ran_seconds += max((at - self.running_since).total_seconds(), 0.0)
            self.running_since = None

    def apply(self, event: Event) -> None:
        task = event.payload_as(TaskEvent)
        data = task.data if task is not None else {}
        self.events.append(event)
        self.updated_at = max(self.updated_at, event.ts)
        match event.kind:
            case "task.started":
                # A pick-up after a crash: the dead runner's segment ended with its last event.
                previous = self.events[-2].ts if len(self.events) > 1 else event.ts
                self._close_segment(previous)
                self.attempts += 1
                self.state = "running"
                self.running_since = event.ts
            case "task.step":
                self.steps = max(self.steps, int(data.get("step", 0)))
                self.tokens += int(data.get("tokens", 0) or 0)
                if data.get("refusals"):  # the egress proxy refused an address during this call
                    self.refused += 1
            case "task.step.unknown":
                self.unknown_steps.append(int(data.get("step", 0)))
            case "task.refused":
                self.refused += 1
            case "task.screenshot":
                self.screenshots.append(str(data.get("file", "")))
            case "task.paused":
                self._close_segment(event.ts)
                self.state = "paused"
                self.paused_by = str(data.get("by") or "owner")
            case "task.resumed":
                self.state = "queued"
                self.paused_by = None  # runs again when a slot is free (task.started says so)
            case "task.cancelled":
                self._close_segment(event.ts)
                self.state = "cancelled"
            case "task.finished":
                self._close_segment(event.ts)
                self.state = "done"
                self.answer = str(data.get("answer", ""))
            case "task.failed":
                self._close_segment(event.ts)
                self.state = "failed"
                self.fail_reason = data.get("reason", "error")
                self.error = str(data.get("error", ""))


class TaskBook:
    """Every task by id, in creation order."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskRecord] = {}
        self.by_key: dict[str, str] = {}  # idempotency key -> task id

    def apply(self, event: Event) -> TaskRecord | None:
        """Apply one event (a task.* kind; others are ignored); the record it touched."""
        if not event.kind.startswith("task."):
            return None
        payload = event.typed(TaskEvent)
        if event.kind == "task.created":
            if payload.task_id in self.tasks:
                return self.tasks[payload.task_id]  # the same event read back twice
            data = payload.data
            record = TaskRecord(
                id=payload.task_id, goal=str(data.get("goal", "")), created_at=event.ts, updated_at=event.ts,
                source=str(data.get("source", "owner")), start_urls=list(data.get("start_urls", [])),
                budget=TaskBudget.model_validate(data.get("budget", {})),
                allow_tools=list(data.get("allow_tools", [])), idempotency_key=data.get("idempotency_key"),
            )
            record.events.append(event)
            self.tasks[record.id] = record
            if record.idempotency_key:
                self.by_key[record.idempotency_key] = record.id
            return record
        known = self.tasks.get(payload.task_id)
        if known is None:
            return None  # events of a task whose creation was refused: nothing to attach them to
        if any(e.id == event.id for e in known.events[-8:]):
            return known  # already applied (published here, then read back)
        known.apply(event)
        return known

    def newest_first(self) -> list[TaskRecord]:
        return sorted(self.tasks.values(), key=lambda r: (r.created_at, r.id), reverse=True)
