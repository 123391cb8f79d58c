"""The OpenAI-compatible routes under `/v1/responses`."""

import asyncio
import json
import logging
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from delegate.openai_standin import chain, standalone, strict
from delegate.openai_standin.engine import ResponseRun, parse_create
from delegate.openai_standin.errors import (
    ApiError,
    api_error,
    invalid_json,
    invalid_request,
    missing_api_key,
    refused,
    response_not_found,
)
from delegate.openai_standin.items import normalize_input
from delegate.openai_standin.script import (
    AnyStep,
    DropStreamStep,
    ErrorStep,
    SlowStep,
    StallStep,
    StreamErrorStep,
    ToolCallStep,
)
from delegate.openai_standin.sse import delta_count
from delegate.openai_standin.state import StandinState, StateDep, note
from delegate.openai_standin.store import StoredResponse
from delegate.openai_standin.streaming import dropped_body, stream_run, wait_or_disconnect
from delegate.openai_standin.tokens import estimate_prompt

log = logging.getLogger(__name__)

# Request-log fields of the two model endpoints, until the request gets that far.
_UNRESOLVED: dict[str, Any] = {
    "step": None,
    "previous_response_id": None,
    "effective_input_tokens": None,
    "compacted": False,
    "response_id": None,
}
# Nobody reads the reply to a request whose client already gave up (nginx's code).
_CLIENT_GONE = 499


def require_api_key(request: Request) -> None:
    if not api_key(request):
        raise missing_api_key()


def api_key(request: Request) -> str:
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


router = APIRouter(prefix="/v1", dependencies=[Depends(require_api_key)])


@router.post("/responses")
async def create_response(request: Request, state: StateDep) -> Response:
    note(request, **_UNRESOLVED)
    body = _checked("responses.create", await _json_body(request))
    demo = state.settings.demo_for(api_key(request))
    create = parse_create(body, demo=demo)
    step = state.engine.take_step("responses", create.body, create.items, create.stream)
    note(request, step=_dump(step))
    if await _before_answer(request, step, create.stream):
        return Response(status_code=_CLIENT_GONE)
    run = state.engine.create(create, step)
    note(
        request,
        previous_response_id=run.previous_response_id,
        effective_input_tokens=run.input_tokens,
        compacted=run.compacted,
        response_id=run.response_id,
    )
    if create.stream:
        options = create.body.get("stream_options") or {}
        events = stream_run(
            request,
            run,
            step,
            lambda status, error: state.engine.finish(run, status, error),
            latency_ms=state.settings.latency_for(demo),
            obfuscate=options.get("include_obfuscation", True) is not False,
        )
        return StreamingResponse(events, media_type="text/event-stream", headers={"cache-control": "no-cache"})
    return await _plain_reply(state, run, step)


@router.post("/responses/compact")
async def compact_response(request: Request, state: StateDep) -> Response:
    note(request, **_UNRESOLVED)
    body = _checked("responses.compact", await _json_body(request))
    items = normalize_input(body.get("input"))
    step = state.engine.take_step("compact", body, items, stream=False)
    note(request, step=_dump(step))
    if await _before_answer(request, step, stream=False):
        return Response(status_code=_CLIENT_GONE)
    reply, tokens = standalone.compact(state.store, body, items, step)
    note(
        request,
        previous_response_id=body.get("previous_response_id"),  # resolved: `compact` raised otherwise
        effective_input_tokens=tokens,
        compacted=True,
        response_id=reply["id"],
    )
    return JSONResponse(reply)


@router.post("/responses/input_tokens")
async def count_input_tokens(request: Request, state: StateDep) -> dict[str, Any]:
    body = _checked("responses.input_tokens", await _json_body(request))
    effective, _ = chain.resolve(state.store, body.get("previous_response_id"), normalize_input(body.get("input")))
    tokens = estimate_prompt(body.get("instructions"), body.get("tools"), effective)
    return {"object": "response.input_tokens", "input_tokens": tokens}


@router.get("/responses/{response_id}")
async def retrieve_response(response_id: str, state: StateDep, stream: bool = False) -> dict[str, Any]:
    stored = _stored(state, response_id)
    if stream:
        raise invalid_request("Streaming retrieval is only supported for background responses.", param="stream")
    return stored.response


@router.delete("/responses/{response_id}")
async def delete_response(response_id: str, state: StateDep) -> dict[str, Any]:
    if not state.store.delete(response_id):
        raise response_not_found(response_id)
    return {"id": response_id, "object": "response", "deleted": True}


@router.post("/responses/{response_id}/cancel")
async def cancel_response(response_id: str, state: StateDep) -> dict[str, Any]:
    _stored(state, response_id)
    raise invalid_request("Only responses created with background=true can be cancelled.")


@router.get("/responses/{response_id}/input_items")
async def list_input_items(
    response_id: str,
    state: StateDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
) -> dict[str, Any]:
    items = list(_stored(state, response_id).input_items)
    if order == "desc":
        items.reverse()
    if after is not None:
        ids = [item.get("id") for item in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0].get("id") if page else None,
        "last_id": page[-1].get("id") if page else None,
        "has_more": len(items) > limit,
    }


async def _json_body(request: Request) -> object:
    try:
        return json.loads(await request.body())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise invalid_json() from exc


def _checked(operation: str, body: object) -> dict[str, Any]:
    """The body, if OpenAI's schema for `operation` takes it; else the API's own 400."""
    refusal = strict.check_body(operation, body)
    if refusal is not None:
        # Logged: a client of ours sending what OpenAI refuses is a bug to see at once.
        log.warning("refused %s: %s", operation, refusal.message)
        raise refused(refusal)
    assert isinstance(body, dict)  # every body schema is an object
    return body


async def _before_answer(request: Request, step: AnyStep | None, stream: bool) -> bool:
    """Scripted faults that happen before any model output. True if the client left."""
    if isinstance(step, ErrorStep):
        raise _scripted_error(step)
    if isinstance(step, StallStep) and (step.after_deltas is None or not stream):
        return await wait_or_disconnect(request, step.seconds)
    return False


async def _plain_reply(state: StandinState, run: ResponseRun, step: AnyStep | None) -> Response:
    response = run.response("completed")
    if isinstance(step, SlowStep):
        await _sleep_per_chunk(step.delay_ms, run)
    if isinstance(step, ToolCallStep) and step.delay_ms:
        await asyncio.sleep(step.delay_ms / 1000)
    if isinstance(step, StreamErrorStep):
        error = {"code": step.code, "message": step.message}
        state.engine.finish(run, "failed", error)
        raise api_error(500, step.message, code=step.code)
    if isinstance(step, DropStreamStep):
        state.engine.finish(run, "incomplete")
        return StreamingResponse(dropped_body(response), media_type="application/json")
    return JSONResponse(response)


async def _sleep_per_chunk(delay_ms: int, run: ResponseRun) -> None:
    # As long as the same answer would take to stream.
    await asyncio.sleep(delay_ms * max(delta_count(run.output), 1) / 1000)


def _scripted_error(step: ErrorStep) -> ApiError:
    headers: dict[str, str] = {}
    retry_ms, retry_s = step.retry_after_ms, step.retry_after
    if step.status == 429 and retry_ms is None and retry_s is None:
        retry_ms, retry_s = 20, 1  # what a short per-minute limit looks like, without slow tests
    if retry_ms is not None:
        headers["retry-after-ms"] = str(retry_ms)
    if retry_s is not None:
        headers["retry-after"] = f"{retry_s:g}"
    if step.should_retry is not None:
        headers["x-should-retry"] = "true" if step.should_retry else "false"
    return api_error(step.status, step.message, type=step.type, param=step.param, code=step.code, headers=headers)


def _stored(state: StandinState, response_id: str) -> StoredResponse:
    stored = state.store.get(response_id)
    if stored is None:
        raise response_not_found(response_id)
    return stored


def _dump(step: AnyStep | None) -> dict[str, Any] | None:
    return None if step is None else step.model_dump(mode="json")
