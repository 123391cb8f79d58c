"""``WS /call``: a Twilio Media Stream, relayed to the voice service and back.

The upgrade carries ``X-Twilio-Signature`` over the stream's URL (the ``wss://`` form of
PUBLIC_BASE_URL + ``/call``, no params, with or without ``:443``; the ``https://`` form is
accepted too, as Twilio's docs are not explicit): anything else is closed before it is
accepted, which the client sees as HTTP 403. Then Twilio says ``connected`` and ``start``
(whose custom parameters name the call, as ``session``, and carry its one-time token), the stream
attaches to the prepared call, and frames flow until either side ends. Closing the socket on our
side makes Twilio go on with the TwiML after ``</Connect>``: the apology, which is what a
caller should hear when voice ends the call or dies.

Twilio's JSON is read with ``json.loads`` and field access only (50 frames a second); a
frame that does not parse is logged and skipped, never the end of the call.
"""

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError

from delegate.contracts.voice import TOKEN_MAX, AudioOut, ClearOut, MarkIn, MarkOut
from delegate.runtime.bus import Bus

from .deps import GatewayContext
from .settings import Settings
from .twilio_signature import signature_valid
from .twilio_voice import CALL_PATH, public_url
from .voice_relay import SESSION_ID, AttachRefused, Ending, VoiceRelay, run_call

log = logging.getLogger(__name__)

router = APIRouter()

CLOSE_NORMAL = 1000
CLOSE_POLICY = 1008
CLOSE_TRY_LATER = 1013
MAX_LOGGED_BAD_FRAMES = 5  # per call: a broken peer must not flood the log


def handshake_urls(settings: Settings) -> list[str]:
    """The stream URL as Twilio may have signed it: ``wss://``, the same with wss's default port
    (the validator adds a default port only for https, so wss gets :80 there), and ``https://``
    (the validator also tries each without a port and https with :443)."""
    stream = public_url(settings, CALL_PATH, websocket=True)
    parts = urlsplit(stream)
    urls = [stream]
    if parts.port is None and parts.scheme == "wss":
        urls.append(urlunsplit(parts._replace(netloc=f"{parts.netloc}:443")))
    return [*urls, public_url(settings, CALL_PATH)]


def handshake_signed(ctx: GatewayContext, headers: Mapping[str, str]) -> bool:
    if ctx.settings.twilio_auth_token is None:
        return False
    if signature_valid(ctx.settings, headers, handshake_urls(ctx.settings), {}):
        return True
    stream_url = public_url(ctx.settings, CALL_PATH, websocket=True)
    log.warning("refused a media stream whose signature does not match %s", stream_url)
    return False


@router.websocket(CALL_PATH)
async def media_stream(websocket: WebSocket) -> None:
    ctx: GatewayContext = websocket.app.state.ctx
    if not handshake_signed(ctx, websocket.headers):
        await websocket.close(CLOSE_POLICY)  # before accept: an HTTP 403
        return
    await websocket.accept()
    bus = ctx.bus
    if bus is None:
        log.warning("media stream refused: not connected to NATS")
        await _close(websocket, CLOSE_TRY_LATER)
        return
    await TwilioStream(websocket, ctx, bus).run()


async def _close(websocket: WebSocket, code: int) -> None:
    with contextlib.suppress(Exception):
        await websocket.close(code)


class TwilioStream:
    def __init__(self, websocket: WebSocket, ctx: GatewayContext, bus: Bus) -> None:
        self.ws = websocket
        self.ctx = ctx
        self.bus = bus
        self.stream_sid = ""
        self.label = "stream"
        self.bad_frames = 0

    def _bad(self, what: str) -> None:
        self.bad_frames += 1
        if self.bad_frames <= MAX_LOGGED_BAD_FRAMES:
            log.info("%s: ignored a frame: %s", self.label, what)

    async def _frame(self) -> dict[str, Any] | None:
        """The next JSON object from Twilio; None once the socket is gone."""
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return None
            text = message.get("text")
            if text is None:
                self._bad("a binary frame")
                continue
            try:
                data = json.loads(text)
            except (ValueError, RecursionError):
                self._bad("not JSON")
                continue
            if not isinstance(data, dict):
                self._bad("not a JSON object")
                continue
            return data

    async def _start(self) -> dict[str, Any] | None:
        """``start``'s body, after any ``connected``; None (and the socket closed) otherwise."""
        while True:
            data = await self._frame()
            if data is None:
                return None
            event = data.get("event")
            if event == "connected":
                continue
            if event == "start" and isinstance(data.get("start"), dict):
                start: dict[str, Any] = data["start"]
                return start
            log.info("media stream refused: %r before start", str(event)[:40])
            await _close(self.ws, CLOSE_POLICY)
            return None

    async def run(self) -> None:
        try:
            start = await asyncio.wait_for(self._start(), self.ctx.settings.voice_start_timeout_s)
        except TimeoutError:
            log.info("media stream refused: no start in time")
            await _close(self.ws, CLOSE_POLICY)
            return
        if start is None:
            return
        params = start.get("customParameters")
        params = params if isinstance(params, dict) else {}
        session_id, token = params.get("session"), params.get("token")
        stream_sid, call_sid = start.get("streamSid"), start.get("callSid")
        if not (isinstance(session_id, str) and SESSION_ID.fullmatch(session_id)) or not (
            isinstance(token, str) and 0 < len(token) <= TOKEN_MAX
        ):
            log.info("media stream refused: start names no call (session) and token")
            await _close(self.ws, CLOSE_POLICY)
            return
        self.stream_sid = stream_sid if isinstance(stream_sid, str) else ""
        self.label = f"call {session_id}"
        relay = VoiceRelay.for_call(self.bus, session_id, self.ctx.settings)
        await relay.open()  # before attaching: the greeting may come at once
        try:
            try:
                await relay.attach(
                    token,
                    stream_sid=self.stream_sid[:64] or None,
                    call_sid=call_sid[:64] if isinstance(call_sid, str) and call_sid else None,
                )
            except AttachRefused as exc:
                log.info("%s: voice refused the stream: %s", self.label, exc)
                await _close(self.ws, CLOSE_POLICY)
                return
            log.info("%s: stream %s attached", self.label, self.stream_sid)
            ending = await run_call(relay, lambda: self._relay_in(relay), self._deliver)
        finally:
            await relay.close()
        self._ended(ending)
        if ending.by != "caller":
            await _close(self.ws, CLOSE_NORMAL)  # Twilio goes on to the TwiML's apology

    def _ended(self, ending: Ending) -> None:
        if ending.by == "lost":
            self.ctx.hub.voice.forget()
        log.info("%s ended by %s: %s", self.label, ending.by, ending.reason)

    async def _relay_in(self, relay: VoiceRelay) -> str:
        """Twilio -> voice until the caller is gone; the hang-up reason."""
        while True:
            data = await self._frame()
            if data is None:
                return "caller_hangup"
            event = data.get("event")
            try:
                if event == "media":
                    media = data["media"]
                    try:
                        ts_ms: int | None = int(media["timestamp"])
                    except (KeyError, TypeError, ValueError):
                        ts_ms = None
                    await relay.audio(media["payload"], ts_ms)
                elif event == "mark":
                    await relay.send(MarkIn(name=data["mark"]["name"]))
                elif event == "stop":
                    return "caller_hangup"
            except (KeyError, TypeError, ValidationError) as exc:
                self._bad(f"{str(event)[:40]}: {type(exc).__name__}")

    async def _deliver(self, out: Any) -> None:
        if isinstance(out, AudioOut):
            frame = {"event": "media", "streamSid": self.stream_sid, "media": {"payload": out.audio}}
        elif isinstance(out, MarkOut):
            frame = {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": out.name}}
        elif isinstance(out, ClearOut):
            frame = {"event": "clear", "streamSid": self.stream_sid}
        else:
            return  # captions are for the browser; a phone has nowhere to show them
        await self.ws.send_text(json.dumps(frame))
