"""``WS /browser-call``: the page's Voice button, relayed to the voice service and back.

The owner signs in exactly as on ``/chat`` (cookie from our own page, Bearer header or
``?token=``; 4401 otherwise); ``?preset=NAME`` picks a voice preset. The call is prepared
and attached at once. Binary frames are PCM16 LE mono 24 kHz audio both ways; everything
else is a JSON text frame (see twilio-email-wire.md §6 and the voice design):

    client -> server: {"type":"hangup"}, {"type":"mark","name"} (a mark's audio has played,
                      or was cleared), {"type":"preset","name"} (ignored: the call is
                      prepared with ``?preset=`` before any audio), {"type":"heartbeat"}
                      (a muted page, which sends no audio, says it is still there)
    server -> client: {"type":"state","status":"connecting"|"live"|"ended","session_id",
                      "reason"?, "message"?}, {"type":"mark","name"}, {"type":"clear"},
                      {"type":"transcript","role","text","final"}, {"type":"error","code","message"}

A frame over 64 KiB, bad JSON or an unknown type gets an error frame; the call goes on.
Neither audio nor a heartbeat for VOICE_MEDIA_TIMEOUT_S ends the call (``stream_lost``): the
``ended`` state frame, then close 4408.
"""

import asyncio
import base64
import contextlib
import json
import logging
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError

from delegate.contracts import topics, ws
from delegate.contracts.voice import AudioOut, ClearOut, MarkIn, MarkOut, PrepareSession, TranscriptOut
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .chat_ws import CLOSE_TRY_LATER, owner_proof
from .deps import GatewayContext
from .voice_relay import SESSION_ID, AttachRefused, Ending, VoiceRelay, run_call

log = logging.getLogger(__name__)

router = APIRouter()

CLOSE_NORMAL = 1000
CLOSE_SILENT = 4408  # the page sent neither audio nor a heartbeat in time
CLOSE_BAD_PRESET = 4400
CLOSE_BUSY = 4409
CLOSE_BUDGET = 4402  # BUDGET_HARD_STOP_OWNER: a spend line is reached (the error frame says which)
MAX_PRESET = 100
KNOWN_TYPES = ("hangup", "mark", "preset", "heartbeat")


def _error(code: str, message: str) -> str:
    return json.dumps(ws.error_frame(code, message))


@router.websocket("/browser-call")
async def browser_call(websocket: WebSocket) -> None:
    ctx: GatewayContext = websocket.app.state.ctx
    await websocket.accept()
    if await owner_proof(websocket, ctx) is None:
        return
    preset = websocket.query_params.get("preset") or None
    if preset is not None and len(preset) > MAX_PRESET:
        await _refuse(websocket, CLOSE_BAD_PRESET, "bad_preset", f"a preset name is at most {MAX_PRESET} characters")
        return
    bus = ctx.bus
    if bus is None:
        await _refuse(websocket, CLOSE_TRY_LATER, "voice_unavailable", "the gateway is not connected to NATS")
        return
    await BrowserCall(websocket, ctx, bus, preset).run()


async def _refuse(websocket: WebSocket, code: int, reason: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_text(_error(reason, message))
        await websocket.close(code, reason)


class BrowserCall:
    def __init__(self, websocket: WebSocket, ctx: GatewayContext, bus: Bus, preset: str | None) -> None:
        self.ws = websocket
        self.ctx = ctx
        self.bus = bus
        self.preset = preset
        self.session_id: str | None = None
        self.label = "browser call"
        self._sending = asyncio.Lock()  # the reader's error frames and the answer audio share the socket

    async def _send_text(self, text: str) -> None:
        async with self._sending:
            await self.ws.send_text(text)

    async def _state(self, status: str, **extra: Any) -> None:
        await self._send_text(json.dumps({"type": "state", "status": status, "session_id": self.session_id, **extra}))

    async def run(self) -> None:
        try:
            await self._state("connecting")
            session_id, token = await self._prepare()
        except _Refused as exc:
            await _refuse(self.ws, exc.close_code, exc.code, exc.message)
            return
        except Exception as exc:  # the page left while we were setting up
            log.debug("%s: gone before it started: %r", self.label, exc)
            return
        self.session_id = session_id
        self.label = f"browser call {session_id}"
        relay = VoiceRelay.for_call(self.bus, session_id, self.ctx.settings)
        await relay.open()  # before attaching: the greeting may come at once
        try:
            try:
                reply = await relay.attach(token)
            except AttachRefused as exc:
                log.info("%s: voice refused the attach: %s", self.label, exc)
                await _refuse(self.ws, CLOSE_TRY_LATER, exc.reason, exc.message)
                return
            if reply.audio_format != "pcm16":
                log.warning("%s: voice prepared %s audio for a browser", self.label, reply.audio_format)
            with contextlib.suppress(Exception):  # a page already gone is found by the reader: a hang-up
                await self._state("live")
            ending = await run_call(relay, lambda: self._relay_in(relay), self._deliver)
        finally:
            await relay.close()
        await self._end(ending)

    async def _prepare(self) -> tuple[str, str]:
        try:
            reply = await self.bus.request(topics.VOICE_PREPARE, PrepareSession(kind="browser", preset=self.preset))
        except (BusUnavailable, RemoteError) as exc:
            log.warning("%s: the voice service did not prepare a call: %s", self.label, exc)
            raise _Refused(CLOSE_TRY_LATER, "voice_unavailable", "the voice service is not answering") from exc
        if reply.ok and reply.session_id and reply.token and SESSION_ID.fullmatch(reply.session_id):
            return reply.session_id, reply.token
        if reply.reason == "busy":
            raise _Refused(CLOSE_BUSY, "busy", reply.message or "another call is in progress")
        if reply.reason == "budget":
            raise _Refused(CLOSE_BUDGET, "budget", reply.message or "the spending limit is reached")
        if reply.reason == "bad_preset":
            raise _Refused(CLOSE_BAD_PRESET, "bad_preset", reply.message or f"no voice preset named {self.preset!r}")
        raise _Refused(CLOSE_TRY_LATER, "voice_unavailable", reply.message or "the voice service cannot take a call")

    async def _end(self, ending: Ending) -> None:
        log.info("%s ended by %s: %s", self.label, ending.by, ending.reason)
        if ending.by == "lost":
            self.ctx.hub.voice.forget()
        with contextlib.suppress(Exception):
            await self._state("ended", reason=ending.reason, message=ending.message or "the call ended")
            await self.ws.close(CLOSE_SILENT if ending.by == "silent" else CLOSE_NORMAL)

    async def _relay_in(self, relay: VoiceRelay) -> str:
        """Browser -> voice until the caller is gone; the hang-up reason."""
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return "caller_hangup"
            audio = message.get("bytes")
            if audio is not None:
                if len(audio) > ws.MAX_FRAME_BYTES:
                    await self._send_text(_error("too_large", f"a frame may be at most {ws.MAX_FRAME_BYTES} bytes"))
                elif audio:
                    await relay.audio(base64.b64encode(audio).decode(), None)
                continue
            if await self._control(relay, message.get("text") or ""):
                return "caller_hangup"

    async def _control(self, relay: VoiceRelay, text: str) -> bool:
        """One JSON frame from the page; True when it hangs up."""
        if len(text) > ws.MAX_FRAME_BYTES or len(text.encode()) > ws.MAX_FRAME_BYTES:
            await self._send_text(_error("too_large", f"a frame may be at most {ws.MAX_FRAME_BYTES} bytes"))
            return False
        try:
            data = json.loads(text)
        except (ValueError, RecursionError):
            await self._send_text(_error("bad_json", "the frame is not valid JSON"))
            return False
        kind = data.get("type") if isinstance(data, dict) else None
        if kind == "hangup":
            return True
        if kind == "heartbeat":
            relay.caller_alive()
            return False
        if kind == "mark" and isinstance(data.get("name"), str):
            try:
                await relay.send(MarkIn(name=data["name"]))
            except ValidationError:
                await self._send_text(_error("bad_frame", "mark: the name is too long"))
        elif kind == "preset":
            log.debug("%s: a preset frame after the call was prepared: ignored", self.label)
        elif kind in KNOWN_TYPES:
            await self._send_text(_error("bad_frame", f"{kind}: a field is missing or of the wrong type"))
        else:
            await self._send_text(_error("unknown_type", f"unknown frame type {str(kind)[:40]!r}"))
        return False

    async def _deliver(self, out: Any) -> None:
        if isinstance(out, AudioOut):
            audio = base64.b64decode(out.audio)
            async with self._sending:
                await self.ws.send_bytes(audio)
            return
        if isinstance(out, MarkOut):
            frame: dict[str, Any] = {"type": "mark", "name": out.name}
        elif isinstance(out, ClearOut):
            frame = {"type": "clear"}
        elif isinstance(out, TranscriptOut):
            frame = {"type": "transcript", "role": out.role, "text": out.text, "final": out.final}
        else:
            return
        await self._send_text(json.dumps(frame))


class _Refused(Exception):
    def __init__(self, close_code: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.close_code = close_code
        self.code = code
        self.message = message
