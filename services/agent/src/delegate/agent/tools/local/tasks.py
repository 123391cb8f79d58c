"""start_task and check_task: the agent hands longer browser or research work to the tasks service.

The tasks service (``tasks.cmd.*``) runs a task's steps apart from the conversation and keeps
it in the ledger; these tools only ask it. The idempotency key of a new task is derived from
the tool call's id, so a call run again (a redelivered turn, a retried request of the same
response) answers the task it started instead of starting a second one.

start_task sends nothing to the outside world, so it is not tagged ``side_effect``; it is
tagged ``starts_task`` instead, which no task may call (see ``SIDE_EFFECT`` / ``STARTS_TASK``).
"""

import hashlib
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.tasks import (
    MAX_GOAL,
    MAX_URLS,
    BudgetRequest,
    TaskCreate,
    TaskGet,
    TaskList,
    TaskListReply,
    TaskReply,
    TaskSummary,
)
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from ..base import CURRENT_CALL, FAILED, INVALID_ARGUMENTS, STARTS_TASK, UNAVAILABLE, Tool, ToolError, object_schema

START_TASK = "start_task"
CHECK_TASK = "check_task"
TAGS = ("local", "tasks")
LATEST = 5  # check_task without an id: this many of the newest tasks
KEY_PREFIX = "agent-call:"  # apart from the keys the gateway sends for the owner's own tasks
MAX_KEY = 200  # TaskCreate.idempotency_key
LIST_ANSWER_CHARS = 300  # an answer in the overview; check_task with the id shows it whole
# A create waits for the service's own timeout (topics.TASKS_CREATE) and reports that, not ours.
START_TIMEOUT_S = topics.TASKS_CREATE.timeout + 5.0
CHECK_TIMEOUT_S = max(topics.TASKS_GET.timeout, topics.TASKS_LIST.timeout) + 5.0


R = TypeVar("R")


class TaskDesk(Protocol):
    async def create(self, cmd: TaskCreate) -> TaskReply: ...

    async def get(self, req: TaskGet) -> TaskReply: ...

    async def list(self, req: TaskList) -> TaskListReply: ...


class BusTaskDesk:
    """The tasks service's queries, over the bus."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def create(self, cmd: TaskCreate) -> TaskReply:
        return await self.bus.request(topics.TASKS_CREATE, cmd)

    async def get(self, req: TaskGet) -> TaskReply:
        return await self.bus.request(topics.TASKS_GET, req)

    async def list(self, req: TaskList) -> TaskListReply:
        return await self.bus.request(topics.TASKS_LIST, req)


def idempotency_key(call_id: str) -> str:
    """``agent-call:<call id>``; a call id too long for the key is hashed to a stable one."""
    key = f"{KEY_PREFIX}{call_id}"
    if len(key) <= MAX_KEY:
        return key
    return KEY_PREFIX + hashlib.sha256(call_id.encode()).hexdigest()


def describe(task: TaskSummary, *, answer_chars: int | None = None) -> str:
    """What the model needs to tell the owner how a task is going, in a few lines."""
    lines = [
        f"Task {task.id} [{task.state}]: {task.goal}",
        f"{task.steps} of at most {task.budget.steps} steps, {task.tokens} tokens, "
        f"{len(task.screenshots)} screenshot(s); started by the {task.source}.",
    ]
    if task.answer is not None:
        answer = task.answer
        if answer_chars is not None and len(answer) > answer_chars:
            answer = f"{answer[:answer_chars]}… (check_task with the id for all of it)"
        lines.append(f"Answer: {answer}")
    if task.error is not None or task.fail_reason is not None:
        reason = f" ({task.fail_reason})" if task.fail_reason else ""
        lines.append(f"Error{reason}: {task.error or 'no message'}")
    if task.unknown_steps:
        # A side effect that may or may not have happened: the owner has to look, not us.
        lines.append(f"Steps whose outcome is unknown (the owner should verify them): {task.unknown_steps}")
    if task.refused:
        lines.append(f"{task.refused} tool call(s) refused: not allowed for this task.")
    return "\n".join(lines)


def task_tools(desk: TaskDesk) -> list[Tool]:
    async def start(args: dict[str, Any]) -> str:
        call = CURRENT_CALL.get()
        try:
            cmd = TaskCreate(
                goal=args["goal"],
                start_urls=args.get("start_urls") or [],
                budget=BudgetRequest(**args["budget"]) if args.get("budget") else None,
                source="agent",
                # Outside the registry there is no call id and no redelivery to guard against.
                idempotency_key=idempotency_key(call.call_id) if call is not None else None,
            )
        except ValidationError as exc:
            raise ToolError(INVALID_ARGUMENTS, f"not a task the tasks service can take: {_first(exc)}") from exc
        task = _one(await _ask(desk.create(cmd)))
        return (
            f"Started task {task.id} (state: {task.state}). The owner can watch it in the Tasks panel; "
            f"check_task with this id tells how it is going and what it found."
        )

    async def check(args: dict[str, Any]) -> str:
        task_id = args.get("task_id")
        if task_id:
            reply = await _ask(desk.get(TaskGet(id=task_id)), not_found=task_id)
            return describe(_one(reply, missing=_no_such(task_id)))
        newest = (await _ask(desk.list(TaskList(limit=LATEST)))).tasks  # the service lists newest first
        if not newest:
            return "No tasks yet."
        return f"The {len(newest)} newest task(s):\n\n" + "\n\n".join(
            describe(t, answer_chars=LIST_ANSWER_CHARS) for t in newest
        )

    budget = object_schema({
        "steps": {"type": "integer", "minimum": 1, "maximum": 1000,
                  "description": "model and tool steps together (default 40)"},
        "seconds": {"type": "number", "exclusiveMinimum": 0, "maximum": 7 * 24 * 3600,
                    "description": "wall-clock seconds while running (default 1800)"},
        "tokens": {"type": "integer", "minimum": 1, "maximum": 100_000_000,
                   "description": "model tokens in and out (default 400000)"},
    })
    budget["description"] = "Limits that end the task early; omit for the defaults."
    return [
        Tool(
            START_TASK,
            "Start a durable background task: a separate model browses the web and works through the goal "
            "step by step (minutes, not seconds), without sending anything or changing anything on the "
            "owner's behalf. Use it for research or for reading many pages; it answers later, so tell the "
            "owner it is running.",
            object_schema(
                {"goal": {"type": "string", "minLength": 1, "maxLength": MAX_GOAL,
                          "description": "what to find out or do, with everything the task needs to know"},
                 "start_urls": {"type": "array", "maxItems": MAX_URLS,
                                "items": {"type": "string", "pattern": "^https?://", "maxLength": 2000},
                                "description": "pages to start from, if known"},
                 "budget": budget},
                ["goal"],
            ),
            start,
            (*TAGS, STARTS_TASK),
            timeout_s=START_TIMEOUT_S,
        ),
        Tool(
            CHECK_TASK,
            "How a background task is going: its state, steps, and its answer or error. Without task_id: "
            f"the {LATEST} newest tasks.",
            object_schema({"task_id": {"type": "string", "minLength": 1, "maxLength": 64}}),
            check,
            TAGS,
            timeout_s=CHECK_TIMEOUT_S,
        ),
    ]


async def _ask(request: Awaitable[R], *, not_found: str | None = None) -> R:
    try:
        return await request
    except BusUnavailable as exc:
        raise ToolError(UNAVAILABLE, "the tasks service is not answering; try again later") from exc
    except RemoteError as exc:
        if exc.code == "not_found" and not_found is not None:
            raise ToolError(FAILED, _no_such(not_found)) from exc
        code = INVALID_ARGUMENTS if exc.code == "bad_request" else UNAVAILABLE if exc.code == "unavailable" else FAILED
        raise ToolError(code, exc.message or exc.code) from exc


def _one(reply: TaskReply, missing: str = "the tasks service answered without the task") -> TaskSummary:
    if reply.task is None:
        raise ToolError(FAILED, missing)
    return reply.task


def _no_such(task_id: str) -> str:
    return f"there is no task {task_id!r}; check_task without an id lists the newest"


def _first(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{err['msg']} (at {where})" if where else err["msg"]
