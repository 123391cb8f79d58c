"""``POST /api/import`` and ``GET /api/import/{id}``: history from elsewhere, into the timeline.

The body is read whole (up to ``IMPORT_MAX_BYTES``) and checked whole before anything is
written: one bad line refuses the import (422, every problem by line number, the refusal
recorded as ``import.started`` + a failed ``import.finished``), so there is never a
half-imported body. A good body is planned as past conversations (``importing.plan``) and
written in the background, one atomic batch per conversation (``importing.job``); the answer
is 202 with the import id at once. No model turn runs for imported messages.

Reading, checking and planning a body is CPU work in proportion to its size (a 50 MB body is
seconds of it): it runs in a worker thread, in steps of one line or one conversation, so the
event loop (every socket, call relay and health check of this gateway) keeps its turn.

Progress comes from two places: this gateway's own job (what it has written so far, known
at once) and the memory service's index (``memory.cmd.import``: what every gateway wrote, as
committed, and how much of it is indexed), so any gateway answers for any import.
"""

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from delegate.contracts import topics
from delegate.contracts.ids import new_id
from delegate.contracts.memory import ImportStatus, ImportStatusRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .bodies import read_body
from .deps import BusDep, SettingsDep, require_owner
from .errors import ApiError
from .idempotency import idempotency_key
from .importing.chatgpt import parse_chatgpt
from .importing.collector import collector_paused
from .importing.job import Imports, Progress
from .importing.lines import Problems
from .importing.ndjson import parse_ndjson
from .importing.plan import Format, ImportPlan, build_plan, import_id_for

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

MAX_IMPORT_ID = 64


def imports_of(request: Request) -> Imports:
    imports: Imports = request.app.state.imports
    return imports


def body_format(content_type: str | None, body: bytes) -> Format:
    """A ChatGPT export is one JSON list; NDJSON is objects, one a line (whatever the header says)."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    first = body.lstrip()[:1]
    if first == b"[" or (media == "application/json" and first != b"{"):
        return "chatgpt"
    return "ndjson"


def prepare(body: bytes, fmt: Format, import_id: str) -> tuple[ImportPlan | None, Problems, int]:
    """The body read, checked and planned (in a worker thread): the plan, or None and what is
    wrong; and how many lines (or messages) were read, good and bad."""
    with collector_paused():
        lines, problems = parse_chatgpt(body) if fmt == "chatgpt" else parse_ndjson(body)
        read = len(lines) + problems.count
        if problems:
            return None, problems, read
        return build_plan(import_id, fmt, lines), problems, read


@router.post("/import", status_code=202)
async def start_import(request: Request, bus: BusDep, settings: SettingsDep) -> Any:
    key = idempotency_key(request)
    body = await read_body(request, settings.import_max_bytes)
    fmt = body_format(request.headers.get("content-type"), body)
    import_id = import_id_for(key, new_id())
    imports = imports_of(request)
    if imports.running(import_id):
        return {"import_id": import_id, "status": "running"}  # the same POST again while it runs
    plan, problems, read = await asyncio.to_thread(prepare, body, fmt, import_id)
    if plan is None:
        progress = imports.refuse(bus, import_id, fmt, read, problems.listed, problems.summary())
        errors = [e.model_dump() for e in progress.errors]
        raise ApiError(422, "bad_lines", problems.summary(), import_id=import_id, errors=errors)
    imports.start(bus, plan)
    return JSONResponse(
        status_code=202,
        content={
            "import_id": import_id, "status": "running", "format": fmt, "lines": plan.lines,
            "conversations": len(plan.conversations), "events": plan.events,
        },
    )


async def indexed_status(bus: Bus, import_id: str) -> ImportStatus | None:
    """What the memory service's index says of the import; None when it knows nothing of it."""
    try:
        return await bus.request(topics.MEMORY_IMPORT, ImportStatusRequest(import_id=import_id))
    except RemoteError as exc:
        if exc.code == "not_found":
            return None
        raise ApiError(502, exc.code, exc.message) from exc


def merged(
    import_id: str, local: Progress | None, indexed: ImportStatus | None, *, index_answered: bool
) -> dict[str, Any]:
    """``index_answered``: the memory service answered and knows nothing of the import yet."""
    # "done" means searchable: the index has applied the import's end, and so (in seq order)
    # every event before it. A failure is news from the writer first. This gateway having
    # written every event is not "done" while the index has not even seen the import start
    # (the ledger has not committed it yet); with the index away, the writer's word is all there is.
    if local is not None and local.status == "failed":
        status = "failed"
    elif indexed is not None:
        status = indexed.status
    elif index_answered:
        status = "running"
    else:
        status = local.status if local is not None else "running"
    errors = local.errors if local is not None and local.errors else (indexed.errors if indexed else [])
    return {
        "import_id": import_id,
        "status": status,
        "events": max(local.events if local else 0, indexed.events if indexed else 0),
        "total": max(local.total if local else 0, indexed.total if indexed else 0),
        "indexed": indexed.indexed if indexed is not None else 0,
        "conversations": max(local.conversations if local else 0, indexed.conversations if indexed else 0),
        "errors": [e.model_dump() for e in errors],
        "message": local.message if local is not None else "",
    }


@router.get("/import/{import_id}")
async def import_status(import_id: str, request: Request, bus: BusDep) -> dict[str, Any]:
    if not 1 <= len(import_id) <= MAX_IMPORT_ID:
        raise ApiError(404, "not_found", "there is no such import")
    local = imports_of(request).get(import_id)
    answered = True
    try:
        indexed = await indexed_status(bus, import_id)
    except BusUnavailable as exc:
        if local is None:
            raise ApiError(503, "memory_unavailable", "the memory service is not answering") from exc
        indexed, answered = None, False  # this gateway's own progress, without the index's count
    if local is None and indexed is None:
        raise ApiError(404, "not_found", f"there is no import {import_id}")
    return merged(import_id, local, indexed, index_answered=answered)
