"""Durable tasks on the bus: the owner's (and the agent's) commands, and what a task looks like.

A task is a model-driven loop of steps run by the tasks service, apart from the conversation.
Everything that happens to it is a ``task.*`` event in the ledger, in the task's own span
(``span.opened`` type ``task``, span id = task id); the service's view of a task is a
projection of those events, and these queries read it.

Event kinds and their ``data`` (the ``TaskEvent`` payload: ``task_id`` + ``data``):

  task.created      goal, start_urls, budget, allow_tools, source ("owner" | "agent")
  task.started      attempt (1 for the first run, +1 for each runner that picked it up again)
  task.step         step, type "model": response_id, calls [{call_id, name, arguments}], text, tokens
                    step, type "tool": call_id, name, arguments, ok, output, ms, side_effect
  task.step.intent  step, call_id, name, arguments, key ("<task id>:<step>"): before a side effect
  task.step.unknown step, call_id, name, key, reason: an intent with no result after a crash
  task.refused      step, call_id, name, reason: a tool call the task may not make (not run)
  task.paused / task.resumed / task.cancelled   by ("owner" | "agent"; "budget": the owner's spend
                    line held it, with reason "budget_usd" | "runaway", detail, until)
  task.finished     answer
  task.failed       reason ("steps" | "seconds" | "tokens" | "workdir" | "failures" | "error"), error
  task.screenshot   step, file (name in the workdir), url

A step is either one model call (its output journaled before any tool it asks for runs) or
one tool call; a restarted runner replays the journal and calls the model again only for
the step after the last completed one.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import Field, field_validator

from .messages import BusModel, Reply
from .text import refuse_blank

TaskState = Literal["queued", "running", "paused", "done", "failed", "cancelled"]
TERMINAL_STATES: frozenset[str] = frozenset({"done", "failed", "cancelled"})
TaskAction = Literal["pause", "resume", "cancel"]
TaskSource = Literal["owner", "agent"]
FailReason = Literal["steps", "seconds", "tokens", "workdir", "failures", "error"]

TASK_KINDS: tuple[str, ...] = (
    "task.created", "task.started", "task.step", "task.step.intent", "task.step.unknown", "task.refused",
    "task.paused", "task.resumed", "task.cancelled", "task.finished", "task.failed", "task.screenshot",
)

MAX_GOAL = 4000
MAX_URLS = 10


class TaskBudget(BusModel):
    """Limits that end a runaway task, each with its own reason."""

    steps: int = Field(default=40, ge=1, le=1000)  # model calls and tool calls together
    seconds: float = Field(default=1800.0, gt=0, le=7 * 24 * 3600)  # wall clock while running
    tokens: int = Field(default=400_000, ge=1, le=100_000_000)  # model input + output tokens


class BudgetRequest(BusModel):
    """The limits a create asks for; what it leaves out is the service's default (TASKS_MAX_*)."""

    steps: int | None = Field(default=None, ge=1, le=1000)
    seconds: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)
    tokens: int | None = Field(default=None, ge=1, le=100_000_000)

    def over(self, defaults: TaskBudget) -> TaskBudget:
        return defaults.model_copy(update=self.model_dump(exclude_none=True))


class TaskCreate(BusModel):
    goal: str = Field(min_length=1, max_length=MAX_GOAL)
    start_urls: list[str] = Field(default_factory=list, max_length=MAX_URLS)
    budget: BudgetRequest | None = None  # None (or a field left out): the service's defaults
    # Side-effecting tools the owner enables for this task by name (none by default); recorded
    # in task.created, so who allowed what stays in the ledger.
    allow_tools: list[str] = Field(default_factory=list, max_length=20)
    source: TaskSource = "owner"
    # The same key again (a retried POST) answers the task it created, and creates nothing.
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("goal")
    @classmethod
    def _goal_has_words(cls, goal: str) -> str:
        return refuse_blank("goal")(goal).strip()

    @field_validator("start_urls")
    @classmethod
    def _urls_are_web(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")) or len(url) > 2000:
                raise ValueError(f"not an http(s) URL: {url[:100]!r}")
        return urls


class TaskSummary(BusModel):
    id: str
    goal: str
    state: TaskState
    created_at: datetime
    updated_at: datetime
    source: TaskSource = "owner"
    start_urls: list[str] = Field(default_factory=list)
    budget: TaskBudget = Field(default_factory=TaskBudget)
    allow_tools: list[str] = Field(default_factory=list)
    steps: int = 0  # completed steps
    tokens: int = 0
    answer: str | None = None
    error: str | None = None
    fail_reason: FailReason | None = None
    screenshots: list[str] = Field(default_factory=list)  # file names in the workdir
    unknown_steps: list[int] = Field(default_factory=list)  # side effects to verify by hand
    # Tool calls refused: not allowed for the task (task.refused), or met an address the egress
    # policy refused (a browser step's ``refusals``: the page or something it loaded).
    refused: int = 0
    paused_by: str | None = None  # while paused: owner, agent or budget (the spend line; resumes by itself)
    run_id: str  # the thoughtflow run (GET /api/runs/{run_id}/diagram)
    last_seq: int = 0  # the newest ledger seq of the task's events


class TaskGet(BusModel):
    id: str = Field(min_length=1, max_length=64)


class TaskList(BusModel):
    limit: int = Field(default=100, ge=1, le=1000)
    states: list[TaskState] | None = None


class TaskControl(BusModel):
    id: str = Field(min_length=1, max_length=64)
    action: TaskAction
    by: TaskSource = "owner"


class TaskReply(Reply):
    task: TaskSummary | None = None


class TaskListReply(Reply):
    tasks: list[TaskSummary] = Field(default_factory=list)


def step_key(task_id: str, step: int) -> str:
    """The idempotency key of a side-effecting step (its intent event says it first)."""
    return f"{task_id}:{step}"


def task_data(**fields: Any) -> dict[str, Any]:
    """``data`` for a TaskEvent without the Nones (events say what they know, nothing more)."""
    return {k: v for k, v in fields.items() if v is not None}


# The tool registry's tag for a tool that changes something outside the conversation (sends,
# calls, writes). The tasks service offers such a tool to a task only when the owner enabled
# it for that task; the registry tags its own tools and MCP tools not marked read-only.
SIDE_EFFECT_TAG = "side_effect"
# The registry policy (agent name) tasks call tools under.
TASKS_POLICY = "tasks"
