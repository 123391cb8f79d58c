"""Delivering a response run (``engine.ResponseRun``) over HTTP, with the scripted transport
faults: pacing, stalls, dropped connections and in-stream failures."""

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.requests import Request

from delegate.openai_standin.engine import ResponseRun
from delegate.openai_standin.script import AnyStep, DropStreamStep, SlowStep, StallStep, StreamErrorStep
from delegate.openai_standin.sse import Event, frame, is_delta, response_events

Finish = Callable[[str, dict[str, Any] | None], None]

_POLL_S = 0.05


class StreamDropped(Exception):
    """Raised after the first bytes so the server closes the connection without
    finishing the body: the client sees a truncated chunked stream."""


async def wait_or_disconnect(request: Request, seconds: float | None) -> bool:
    """Sleep up to `seconds` (forever if None). True if the client left first."""
    loop = asyncio.get_running_loop()
    deadline = None if seconds is None else loop.time() + seconds
    while deadline is None or loop.time() < deadline:
        if await request.is_disconnected():
            return True
        remaining = _POLL_S if deadline is None else max(0.0, min(_POLL_S, deadline - loop.time()))
        await asyncio.sleep(remaining)
    return False


def delta_delay_s(step: AnyStep | None, latency_ms: int) -> float:
    return (step.delay_ms if isinstance(step, SlowStep) else latency_ms) / 1000


async def stream_run(
    request: Request, run: ResponseRun, step: AnyStep | None, finish: Finish, *, latency_ms: int, obfuscate: bool
) -> AsyncIterator[bytes]:
    events = response_events(run.response("in_progress"), run.output, run.response("completed"), obfuscate=obfuscate)
    cut = _cut_point(step)
    delay = delta_delay_s(step, latency_ms)
    deltas = 0
    outcome = "incomplete"  # unless we reach a terminal event
    try:
        for event in events:
            at_cut = cut is not None and ((is_delta(event) and deltas == cut) or event["type"] == "response.completed")
            if at_cut:
                cut = None
                if isinstance(step, DropStreamStep):
                    raise StreamDropped(f"scripted drop after {deltas} deltas")
                if isinstance(step, StreamErrorStep):
                    failure, error = _failure_event(step, run, event["sequence_number"])
                    outcome = "failed"
                    finish("failed", error)
                    yield frame(failure)
                    return
                if isinstance(step, StallStep) and await wait_or_disconnect(request, step.seconds):
                    return
            if is_delta(event):
                await asyncio.sleep(delay)
                deltas += 1
            if event["type"] == "response.completed":
                # Done server-side, even if the client hangs up before reading this.
                outcome = "completed"
                finish("completed", None)
            yield frame(event)
    finally:
        if outcome == "incomplete":
            finish("incomplete", None)


async def dropped_body(payload: dict[str, Any]) -> AsyncIterator[bytes]:
    """Half a JSON body, then a dropped connection (non-streaming `drop_stream`)."""
    data = json.dumps(payload).encode()
    yield data[: len(data) // 2]
    raise StreamDropped("scripted drop of a JSON body")


def _cut_point(step: AnyStep | None) -> int | None:
    """After how many deltas a scripted fault strikes (None: no fault in the stream)."""
    if isinstance(step, DropStreamStep | StreamErrorStep | StallStep):
        return step.after_deltas
    return None


def _failure_event(step: StreamErrorStep, run: ResponseRun, sequence_number: int) -> tuple[Event, dict[str, Any]]:
    error = {"code": step.code, "message": step.message}
    kind = "error"
    fields: dict[str, Any]
    if step.shape == "failed":
        kind, fields = "response.failed", {"response": run.response("failed", error)}
    elif step.shape == "error":  # the documented flat shape: the SDK yields it as an event
        fields = {"code": step.code, "message": step.message, "param": None}
    else:  # the shape seen on the wire: a top-level `error` key makes the SDK raise
        fields = {"error": {"type": step.code, **error, "param": None}}
    return {"type": kind, "sequence_number": sequence_number, **fields}, error


class _DropFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BaseExceptionGroup):
            return not exc.subgroup(StreamDropped)
        return not isinstance(exc, StreamDropped)


def install_drop_log_filter() -> None:
    """Scripted drops are intended: keep uvicorn from logging them as crashes."""
    logging.getLogger("uvicorn.error").addFilter(_DropFilter())
