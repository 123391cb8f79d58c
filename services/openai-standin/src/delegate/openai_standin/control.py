"""The control API for tests and demos (`/_standin/*`). Not part of OpenAI's API."""

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import TypeAdapter, ValidationError

from delegate.openai_standin.realtime.script import steps_adapter as realtime_steps
from delegate.openai_standin.script import S, StepQueue, steps_adapter
from delegate.openai_standin.state import StateDep

router = APIRouter(prefix="/_standin")


@router.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.post("/script")
async def add_script(request: Request, state: StateDep) -> JSONResponse:
    """Append steps: a JSON list of steps, or `{"steps": [...]}`."""
    return await _queue(request, steps_adapter, state.script)


@router.get("/script")
async def pending_script(state: StateDep) -> list[dict[str, Any]]:
    return state.script.pending()


@router.get("/requests")
async def recorded_requests(state: StateDep) -> list[dict[str, Any]]:
    return state.requests.entries()


@router.get("/responses/{response_id}")
async def stored_response(response_id: str, state: StateDep) -> JSONResponse:
    """A stored response with the chain context the stand-in keeps for it."""
    stored = state.store.get(response_id)
    if stored is None:
        return JSONResponse({"error": "not found"}, status_code=404)
    return JSONResponse(
        {
            "response": stored.response,
            "input_items": stored.input_items,
            "chain_items": stored.chain_items(),
            "compacted": stored.compacted,
        }
    )


@router.post("/reset")
async def reset(state: StateDep) -> dict[str, bool]:
    """Everything, Realtime included."""
    state.reset()
    return {"ok": True}


@router.post("/realtime/script")
async def add_realtime_script(request: Request, state: StateDep) -> JSONResponse:
    """Append Realtime steps (a JSON list, or `{"steps": [...]}`) for the coming user turns."""
    return await _queue(request, realtime_steps, state.realtime.script)


@router.get("/realtime/script")
async def pending_realtime_script(state: StateDep) -> list[dict[str, Any]]:
    return state.realtime.script.pending()


@router.get("/realtime/sessions")
async def realtime_sessions(state: StateDep) -> list[dict[str, Any]]:
    return state.realtime.log.sessions()


@router.post("/realtime/reset")
async def reset_realtime(state: StateDep) -> dict[str, bool]:
    state.realtime.reset()
    return {"ok": True}


async def _queue(request: Request, adapter: TypeAdapter[list[S]], script: StepQueue[S]) -> JSONResponse:
    """Validate the body's steps and queue them, for either API's script."""
    payload = await request.json()
    raw = payload.get("steps") if isinstance(payload, dict) else payload
    try:
        steps = adapter.validate_python(raw)
    except ValidationError as exc:
        return _invalid_script(exc)
    script.add(steps)
    return JSONResponse({"queued": len(steps), "pending": len(script.pending())})


def _invalid_script(exc: ValidationError) -> JSONResponse:
    detail = json.loads(exc.json(include_url=False))
    return JSONResponse({"error": "invalid script", "detail": detail}, status_code=422)
