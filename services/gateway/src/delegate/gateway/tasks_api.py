"""``/api/tasks``: create, list, get, pause, resume and cancel durable tasks; their events as SSE.

The tasks service owns tasks and answers the commands (``tasks.cmd.*``); the gateway passes
them on. The event stream is read from the ledger, not from the service: every task event is a
ledger event in the task's span, so ``GET /api/tasks/{id}/events`` replays the span after the
client's ``Last-Event-ID`` (a ledger seq: monotonic) and then follows it live, woken by the
committed events the gateway already receives. A reconnect therefore gets no gap and no
duplicate; what cannot be filled (the ledger is behind the id the client names, or not
answering) is sent as an ``event: gap``, never skipped silently.
"""

import asyncio
import json
import logging
import re
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.sse import format_sse_event

from delegate.contracts import topics
from delegate.contracts.events import MAX_SEQ, Event, SpanClosed
from delegate.contracts.messages import QueryRequest
from delegate.contracts.tasks import TaskAction, TaskControl, TaskCreate, TaskGet, TaskList, TaskReply
from delegate.contracts.topics import Query, Rep, Req
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .ask import ask
from .bodies import read_json
from .deps import BusDep, ContextDep, SettingsDep, require_owner
from .errors import ApiError
from .http import parse_body
from .idempotency import idempotency_key

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

TASK_ID = re.compile(r"^[A-Za-z0-9-]{1,64}$")
FILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,120}\.png$")
SILENT = ("tasks_unavailable", "the tasks service is not answering")
RETRY_MS = 2000  # the reconnection delay the stream asks EventSource for
PAGE = 500
KEEPALIVE_S = 15.0
LIVE_QUEUE = 1000  # live events a stream holds while its client reads; past it, it reads the ledger


def _check_id(task_id: str) -> None:
    if not TASK_ID.match(task_id):
        raise ApiError(404, "not_found", "there is no such task")


async def ask_tasks(bus: Bus, query: Query[Req, Rep], req: Req) -> Rep:
    return await ask(bus, query, req, silent=SILENT)


def one(reply: TaskReply) -> dict[str, Any]:
    if reply.task is None:
        raise ApiError(502, "failed", "the tasks service answered without the task")
    return reply.task.model_dump(mode="json")


@router.post("/tasks", status_code=201)
async def create_task(request: Request, bus: BusDep) -> dict[str, Any]:
    """``{"goal", "start_urls"?, "budget"?, "allow_tools"?}``; ``Idempotency-Key`` makes a retry safe."""
    data = await read_json(request)
    if isinstance(data, dict):
        data = {**data, "source": "owner"}
        key = idempotency_key(request)
        if key is not None:
            data["idempotency_key"] = key
    return one(await ask_tasks(bus, topics.TASKS_CREATE, parse_body(TaskCreate, data)))


@router.get("/tasks")
async def list_tasks(bus: BusDep) -> dict[str, Any]:
    reply = await ask_tasks(bus, topics.TASKS_LIST, TaskList())
    return {"tasks": [t.model_dump(mode="json") for t in reply.tasks]}


@router.get("/tasks/{task_id}")
async def get_task(task_id: str, bus: BusDep) -> dict[str, Any]:
    _check_id(task_id)
    return one(await ask_tasks(bus, topics.TASKS_GET, TaskGet(id=task_id)))


async def _control(task_id: str, action: TaskAction, bus: Bus) -> dict[str, Any]:
    _check_id(task_id)
    return one(await ask_tasks(bus, topics.TASKS_CONTROL, TaskControl(id=task_id, action=action)))


@router.post("/tasks/{task_id}/pause")
async def pause_task(task_id: str, bus: BusDep) -> dict[str, Any]:
    return await _control(task_id, "pause", bus)


@router.post("/tasks/{task_id}/resume")
async def resume_task(task_id: str, bus: BusDep) -> dict[str, Any]:
    return await _control(task_id, "resume", bus)


@router.post("/tasks/{task_id}/cancel")
async def cancel_task(task_id: str, bus: BusDep) -> dict[str, Any]:
    return await _control(task_id, "cancel", bus)


@router.get("/tasks/{task_id}/files/{name}")
async def task_file(task_id: str, name: str, settings: SettingsDep) -> FileResponse:
    """A screenshot from the task's workdir (PNG only; nothing outside the workdir)."""
    _check_id(task_id)
    if not FILE_NAME.match(name):
        raise ApiError(404, "not_found", "there is no such file")
    root = (settings.runtime_data_dir / "copilot-workdir" / "tasks" / task_id).resolve()
    path = (root / name).resolve()
    if path.parent != root or not path.is_file():
        raise ApiError(404, "not_found", "there is no such file")
    return FileResponse(path, media_type="image/png", headers={"Cache-Control": "no-store",
                                                                "X-Content-Type-Options": "nosniff"})


def parse_last_id(request: Request) -> int:
    raw = request.headers.get("last-event-id") or request.query_params.get("after")
    if raw is None or raw == "":
        return 0
    if not raw.isdigit() or int(raw) > MAX_SEQ:
        raise ApiError(400, "bad_cursor", "Last-Event-ID must be an event id this stream sent (a whole number)")
    return int(raw)


@router.get("/tasks/{task_id}/events")
async def task_events(task_id: str, request: Request, bus: BusDep, ctx: ContextDep) -> StreamingResponse:
    _check_id(task_id)
    after = parse_last_id(request)
    await ask_tasks(bus, topics.TASKS_GET, TaskGet(id=task_id))  # 404 for a task that does not exist
    return StreamingResponse(
        _stream(task_id, after, bus, ctx, request), media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def _sse(event: Event) -> bytes:
    return format_sse_event(data_str=event.model_dump_json(exclude={"fence"}), event="task", id=str(event.seq))


async def _stream(task_id: str, after: int, bus: Bus, ctx: ContextDep, request: Request) -> AsyncIterator[bytes]:
    """Replay from the ledger, then follow the hub's committed events (gapless, in seq order).

    The watcher is registered before the first query: anything the hub forwards after that is
    queued here, anything before it was committed before the query ran, so replay and live
    overlap and never leave a hole (the overlap is dropped by seq). A client too slow for the
    queue falls back to reading the ledger again.
    """
    wake = asyncio.Event()
    live: deque[Event] = deque()
    state = {"overflow": False}

    def watcher(event: Event) -> None:
        if event.span_id != task_id:
            return
        if len(live) >= LIVE_QUEUE:
            state["overflow"] = True
        else:
            live.append(event)
        wake.set()

    ctx.hub.watchers.add(watcher)
    try:
        yield format_sse_event(retry=RETRY_MS, comment="task events")
        last = after
        replaying = True
        reported = False
        while not await request.is_disconnected():
            wake.clear()
            batch: list[Event] = []
            if replaying or state["overflow"]:
                state["overflow"] = False
                try:
                    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=last, span_id=task_id,
                                                                                limit=PAGE))
                except (BusUnavailable, RemoteError) as exc:
                    if not reported:
                        reported = True
                        yield format_sse_event(event="gap", data_str=_gap(
                            last, f"the ledger is not answering ({exc}); the stream resumes here when it does"))
                    await _wait(wake, 1.0)
                    continue
                reported = False
                if last > reply.last_seq:
                    yield format_sse_event(event="gap", data_str=_gap(
                        last, f"the ledger's newest event is {reply.last_seq}, older than {last}: events were "
                              "lost (restored from a backup?) and cannot be replayed"))
                    last = reply.last_seq
                batch = reply.events
                replaying = reply.more
            while live:
                batch.append(live.popleft())
            for event in batch:
                if event.seq is None or event.seq <= last:
                    continue
                yield _sse(event)
                last = event.seq
                if event.is_kind(SpanClosed):
                    yield format_sse_event(event="end", data_str='{"reason":"the task ended"}')
            if replaying or live or state["overflow"]:
                continue
            if not await _wait(wake, KEEPALIVE_S):
                yield format_sse_event(comment="keepalive")
    finally:
        ctx.hub.watchers.discard(watcher)


def _gap(after: int, reason: str) -> str:
    return json.dumps({"after_seq": after, "reason": reason})


async def _wait(wake: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(wake.wait(), timeout)
    except TimeoutError:
        return False
    return True

