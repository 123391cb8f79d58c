"""REST routes: health, sign-in and sign-out, timeline, state, messages, compact, end conversation,
and the turn controls (stop, regenerate)."""

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from delegate.contracts import topics, ws
from delegate.contracts.cursor import Cursor, CursorError
from delegate.contracts.messages import AgentCommand, AgentState, PageRequest, Usage
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.runtime.webpush import SubscriptionsUnavailable

from .auth import SESSION_COOKIE
from .bodies import read_json
from .channels import ChannelsCache
from .deps import BusDep, ContextDep, SettingsDep, check_cookie_origin, require_json_body, require_owner
from .errors import ApiError
from .inputs import InputRejected, message_problem
from .params import parse_limit
from .push_api import end_session
from .settings import Settings
from .sign_in import SessionsUnavailable
from .turns import TurnRejected, regenerate_turn, stop_turn, submit_edit_or_message

log = logging.getLogger(__name__)

MAX_PAGE = 5000
READY_PING_TIMEOUT_S = 1.0
# /readyz: ready when these answer ready; also unready, with the reason, when one of the
# others says it refuses to start (the NATS server lacks what it needs): that waits on the
# operator, where a service that is merely not up yet (background work) does not hold chat back.
READY_NEEDS = ("ledger", "agent")
REFUSAL_WATCHED = ("inner-plane",)

public = APIRouter()
api = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])


# ---- request bodies ------------------------------------------------------------------------


class SignIn(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    token: str = Field(max_length=512)


def parse_body(model: type[BaseModel], data: Any) -> Any:
    if not isinstance(data, dict):
        raise ApiError(400, "bad_request", "the body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problem = message_problem(exc) if issubclass(model, ws.MessageBody) else None
        if problem is not None:
            raise ApiError(problem.status, problem.code, problem.message) from exc
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "body"
        if first.get("type") == "empty_text":  # one code for empty text, whichever field (contracts.text)
            raise ApiError(400, "empty_text", f"{where}: {first.get('msg', 'empty')}") from exc
        raise ApiError(400, "bad_request", f"{where}: {first.get('msg', 'invalid')}") from exc


# ---- health --------------------------------------------------------------------------------


@public.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def channels_cache(request: Request) -> ChannelsCache:
    cache: ChannelsCache = request.app.state.channels
    return cache


async def voice_detail(bus: Bus) -> dict[str, Any] | None:
    """Whether the voice service answers its ping (and is ready); None when it does not."""
    try:
        pong = await bus.ping("voice", timeout=READY_PING_TIMEOUT_S)
    except (BusUnavailable, RemoteError):
        return None
    return {"ready": pong.ready, "detail": pong.detail}


@public.get("/readyz")
async def readyz(request: Request, ctx: ContextDep) -> JSONResponse:
    bus = ctx.bus
    channels: dict[str, Any] | None = None
    voice: dict[str, Any] | None = None
    reasons: dict[str, str] = {}
    if bus is None or not bus.nc.is_connected:
        missing = ["nats", "ledger", "agent"]
    else:
        names = (*READY_NEEDS, *REFUSAL_WATCHED)
        # The pollers' state and voice's pong are detail, asked alongside the pings: readiness
        # stays ledger + agent (chat works without phone calls).
        channels_task = asyncio.ensure_future(channels_cache(request).get(bus))
        voice_task = asyncio.ensure_future(voice_detail(bus))
        pongs = await asyncio.gather(
            *(bus.ping(name, timeout=READY_PING_TIMEOUT_S) for name in names), return_exceptions=True
        )
        missing = []
        for name, pong in zip(names, pongs, strict=True):
            answer = None if isinstance(pong, BaseException) else pong
            if answer is not None and answer.refusal:
                reasons[name] = answer.refusal
            if (name in READY_NEEDS and not (answer is not None and answer.ready)) or name in reasons:
                missing.append(name)
        channels = await channels_task
        voice = await voice_task
    if missing:
        body: dict[str, Any] = {"status": "unready", "missing": missing}
        if reasons:
            body["reasons"] = reasons
        return JSONResponse(body, status_code=503)
    return JSONResponse({"status": "ready", "channels": channels, "voice": voice})


# ---- sign-in -------------------------------------------------------------------------------


def _set_cookie(response: Response, value: str, *, secure: bool, max_age: int) -> None:
    # HttpOnly: no script reads it. SameSite=Strict: no cross-site request carries it (a
    # same-site page on another port can still send it: the Origin check covers that).
    response.set_cookie(
        SESSION_COOKIE, value, httponly=True, samesite="strict", secure=secure, path="/", max_age=max_age
    )


def _clear_cookie(response: Response, secure: bool) -> None:
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="strict", secure=secure)


@public.post("/api/session", status_code=204)
async def sign_in(request: Request, ctx: ContextDep) -> Response:
    """The token, once, for a session cookie: a new random session id, stored server-side."""
    # A foreign page may not sign the browser in either (login CSRF); scripts send no Origin, but
    # every sign-in is sent to one of our own names (a cookie set under a rebound name is refused).
    if not ctx.auth.origin_allowed(request.headers):
        raise ApiError(403, "forbidden_origin", "this page's origin may not sign in")
    require_json_body(request.method, request.headers)
    body = parse_body(SignIn, await read_json(request, limit=4096))
    if not ctx.auth.check_token(body.token):
        raise ApiError(401, "unauthorized", "that is not the owner token")
    try:
        session_id, record = await ctx.auth.sessions.create()
    except SessionsUnavailable as exc:
        raise ApiError(503, "bus_unavailable", "signing in needs NATS, which is not answering; try again") from exc
    response = Response(status_code=204)
    lifetime = int((record.expires_at - record.created_at).total_seconds())
    _set_cookie(response, session_id, secure=ctx.auth.cookie_secure(request.url.scheme), max_age=lifetime)
    return response


@public.delete("/api/session", status_code=204)
async def sign_out(request: Request, ctx: ContextDep) -> Response:
    """Revoke this browser's session (the cookie stops working everywhere), and clear it."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if cookie:
        check_cookie_origin(ctx, request)
        try:
            await ctx.auth.sessions.revoke(cookie)
            await end_session(ctx.push, cookie)  # this browser's push subscription dies with it
        except (SessionsUnavailable, SubscriptionsUnavailable) as exc:
            raise ApiError(503, "bus_unavailable", "signing out needs NATS, which is not answering; try again") from exc
    response = Response(status_code=204)
    _clear_cookie(response, ctx.auth.cookie_secure(request.url.scheme))
    return response


@api.delete("/sessions", status_code=204)
async def sign_out_everywhere(request: Request, ctx: ContextDep) -> Response:
    """Revoke every browser session ("sign out everywhere"); the Bearer token keeps working."""
    try:
        await ctx.auth.sessions.revoke_all()
        await end_session(ctx.push, None, everywhere=True)
    except (SessionsUnavailable, SubscriptionsUnavailable) as exc:
        raise ApiError(503, "bus_unavailable", "signing out needs NATS, which is not answering; try again") from exc
    response = Response(status_code=204)
    _clear_cookie(response, ctx.auth.cookie_secure(request.url.scheme))
    return response


# ---- timeline and state ----------------------------------------------------------------------


@api.get("/timeline")
async def timeline(
    bus: BusDep, settings: SettingsDep, limit: str | None = None, before: str | None = None
) -> JSONResponse:
    size = parse_limit(limit, default=settings.timeline_history_event_limit, most=MAX_PAGE)
    if before is not None:
        try:
            Cursor.decode(before)
        except CursorError as exc:
            raise ApiError(400, "bad_cursor", "the cursor is malformed") from exc
    try:
        # Forwarded as the ledger wrote it (its events were validated when they were appended):
        # validating and encoding them again here was most of a page's time.
        page = await bus.request_unchecked(topics.LEDGER_PAGE, PageRequest(limit=size, before=before))
    except BusUnavailable as exc:
        raise ApiError(503, "ledger_unavailable", "the ledger is not answering") from exc
    except RemoteError as exc:
        if exc.code in ("bad_cursor", "bad_request"):
            raise ApiError(400, exc.code, exc.message) from exc
        raise ApiError(502, exc.code, exc.message) from exc
    return JSONResponse({"events": page.get("events", []), "cursor": page.get("cursor")})


def offline_state(settings: Settings) -> AgentState:
    """What /api/state says while the agent is away: neutral figures, and truly which model answers."""
    return AgentState(
        usage=Usage(input_tokens=0, compact_threshold=settings.compact_threshold, percent=0.0),
        offline_model=settings.openai.offline,
    )


@api.get("/state")
async def state(request: Request, ctx: ContextDep, bus: BusDep, settings: SettingsDep) -> dict[str, Any]:
    # Asked together: the pollers' and voice's shorter timeouts never add to the agent's.
    channels_task = asyncio.ensure_future(channels_cache(request).get(bus))
    voice_task = asyncio.ensure_future(ctx.hub.voice.get(bus))
    try:
        reply = await bus.request(topics.AGENT_STATE_GET, AgentCommand(), timeout=2.0)
    except BusUnavailable as exc:
        # The body still carries a neutral state so a page can draw its meter while it waits.
        offline = offline_state(settings).model_dump(mode="json", exclude={"error"})
        raise ApiError(
            503, "agent_unavailable", "the agent is not answering",
            state={**offline, "channels": await channels_task, "voice": await voice_task},
        ) from exc
    except RemoteError as exc:
        channels_task.cancel()
        voice_task.cancel()
        raise ApiError(502, exc.code, exc.message) from exc
    return {
        **reply.model_dump(mode="json", exclude={"error"}),
        "channels": await channels_task,
        "voice": await voice_task,
    }


# ---- input and commands -----------------------------------------------------------------------


@api.post("/messages", status_code=202)
async def post_message(request: Request, ctx: ContextDep) -> dict[str, Any]:
    body: ws.MessageBody = parse_body(ws.MessageBody, await read_json(request))
    bus = ctx.require_bus()
    try:
        done = await submit_edit_or_message(bus, body)
    except InputRejected as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    except BusUnavailable as exc:
        raise ApiError(503, "bus_unavailable", "the message could not be stored; send it again") from exc
    return {"event_id": done.event_id, "duplicate": done.duplicate}


async def agent_command(bus: Bus, which: str) -> None:
    query = topics.AGENT_COMPACT if which == "compact" else topics.AGENT_END
    try:
        reply = await bus.request(query, AgentCommand())
    except BusUnavailable as exc:
        raise ApiError(503, "agent_unavailable", "the agent is not answering") from exc
    except RemoteError as exc:
        status = 409 if exc.code == "busy" else 502
        raise ApiError(status, exc.code, exc.message) from exc
    if not reply.ok:
        raise ApiError(502, "failed", f"the agent could not {which.replace('_', ' ')}")


@api.post("/compact", status_code=202)
async def compact(bus: BusDep) -> dict[str, Any]:
    await agent_command(bus, "compact")
    return {"ok": True}


@api.post("/conversation/end", status_code=200)
async def end_conversation(bus: BusDep) -> dict[str, Any]:
    await agent_command(bus, "end_conversation")
    return {"ok": True}



def _turn_id(turn_id: str) -> str:
    if not 1 <= len(turn_id) <= 64:
        raise ApiError(400, "bad_request", "turn_id: must be 1 to 64 characters")
    return turn_id


@api.post("/turns/{turn_id}/stop", status_code=200)
async def stop(turn_id: str, bus: BusDep) -> dict[str, Any]:
    """Stop generating the answer to ``turn_id``; the partial answer is kept, marked stopped."""
    try:
        await stop_turn(bus, _turn_id(turn_id))
    except TurnRejected as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    except BusUnavailable as exc:
        raise ApiError(503, "agent_unavailable", "the agent is not answering") from exc
    return {"ok": True, "turn_id": turn_id}


@api.post("/turns/{turn_id}/regenerate", status_code=202)
async def regenerate(turn_id: str, bus: BusDep) -> dict[str, Any]:
    """Answer the last turn again: a new attempt, queued behind whatever runs."""
    try:
        input_id = await regenerate_turn(bus, _turn_id(turn_id))
    except TurnRejected as exc:
        raise ApiError(exc.status, exc.code, exc.message) from exc
    except BusUnavailable as exc:
        raise ApiError(503, "bus_unavailable", "the request could not be stored; try again") from exc
    return {"ok": True, "turn_id": turn_id, "input_id": input_id}
