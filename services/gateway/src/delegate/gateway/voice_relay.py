"""One call's bus side: caller audio out on ``voice_in(sid)``, answers in from ``voice_out(sid)``.

Both sockets (Twilio's ``/call`` and the browser's ``/browser-call``) relay through a
``VoiceRelay`` and are run by ``run_call``: the socket's reader, the pump that hands each
``VoiceOut`` to the socket, and the heartbeat, until one side ends. The relay subscribes
before it attaches, so the greeting the voice service flushes at attach is never missed.

The watchdogs: the voice service sends something (a heartbeat at least) every
``VOICE_HEARTBEAT_S``; nothing for ``VOICE_LOST_AFTER_S`` means it died, and the call ends
on our side (``voice_lost``). The caller's side sends audio all the time (Twilio every 20 ms,
a muted page a heartbeat frame): nothing from it for ``VOICE_MEDIA_TIMEOUT_S`` means the
stream is lost even though its socket still answers pings, and the call ends (``stream_lost``)
so the voice lock is free for the next one. The hot path stays lean: one model per frame, encoded and
decoded with the shared topic adapters (a new per-call Topic would build its own).
"""

import asyncio
import contextlib
import logging
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from delegate.contracts import subjects, topics
from delegate.contracts.voice import (
    AttachReply,
    AttachSession,
    AudioIn,
    EndOut,
    HangupIn,
    HeartbeatIn,
    HeartbeatOut,
    MarkIn,
)
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .settings import Settings

log = logging.getLogger(__name__)

VOICE_IN = topics.VOICE_IN_ANY  # the models of every voice_in(sid) / voice_out(sid) subject
VOICE_OUT = topics.VOICE_OUT_ANY
# A call's id (the wire's session id) becomes a subject token: no dots, wildcards or spaces can be let through.
SESSION_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")
OUT_QUEUE_LIMIT = 2000  # ~40 s of 20 ms answer chunks: more means the socket stopped taking them

VoiceIn = AudioIn | MarkIn | HangupIn | HeartbeatIn


class AttachRefused(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class VoiceRelay:
    def __init__(
        self, bus: Bus, session_id: str, *, heartbeat_s: float, lost_after_s: float, media_timeout_s: float
    ) -> None:
        self.bus = bus
        self.session_id = session_id
        self.heartbeat_s = heartbeat_s
        self.lost_after_s = lost_after_s
        self.media_timeout_s = media_timeout_s
        self._in_subject = subjects.voice_in(session_id)
        self._out: asyncio.Queue[Any] = asyncio.Queue(OUT_QUEUE_LIMIT)
        self._sub: Subscription | None = None
        self.last_heard = time.monotonic()
        self.last_from_caller = time.monotonic()  # audio, or a muted page's heartbeat
        self.dropped = 0  # messages from voice the socket had no room for

    @classmethod
    def for_call(cls, bus: Bus, session_id: str, settings: Settings) -> "VoiceRelay":
        return cls(
            bus, session_id, heartbeat_s=settings.voice_heartbeat_s, lost_after_s=settings.voice_lost_after_s,
            media_timeout_s=settings.voice_media_timeout_s,
        )

    async def open(self) -> None:
        self._sub = await self.bus.nc.subscribe(subjects.voice_out(self.session_id), cb=self._on_out)
        self.last_heard = time.monotonic()

    async def attach(self, token: str, *, stream_sid: str | None = None, call_sid: str | None = None) -> AttachReply:
        """Claim the prepared call; ``AttachRefused`` when the voice service says no or is away."""
        try:
            reply = await self.bus.request(
                topics.voice_attach(self.session_id),
                AttachSession(token=token, stream_sid=stream_sid, call_sid=call_sid),
            )
        except BusUnavailable as exc:
            raise AttachRefused("unavailable", "the voice service is not answering") from exc
        except RemoteError as exc:
            raise AttachRefused(exc.code, exc.message) from exc
        if not reply.ok:
            raise AttachRefused(reply.reason or "refused", reply.message or "the voice service refused the call")
        self.last_heard = self.last_from_caller = time.monotonic()
        return reply

    async def close(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(Exception):
                await self._sub.unsubscribe()
            self._sub = None

    # ---- to voice --------------------------------------------------------------------------

    async def send(self, msg: VoiceIn) -> None:
        await self.bus.emit_raw(self._in_subject, VOICE_IN.encode(msg))

    async def audio(self, payload: str, ts_ms: int | None) -> None:
        self.caller_alive()
        await self.send(AudioIn(audio=payload, ts_ms=ts_ms, sent_at=time.time()))

    def caller_alive(self) -> None:
        self.last_from_caller = time.monotonic()

    async def heartbeats(self) -> None:
        while True:
            await self.send(HeartbeatIn())
            await asyncio.sleep(self.heartbeat_s)

    # ---- from voice ------------------------------------------------------------------------

    async def _on_out(self, msg: Msg) -> None:
        self.last_heard = time.monotonic()
        try:
            out = VOICE_OUT.decode(msg.data)
        except ValidationError as exc:
            log.warning("call %s: dropping an undecodable message from voice: %s", self.session_id, exc)
            return
        if isinstance(out, HeartbeatOut):
            return
        try:
            self._out.put_nowait(out)
        except asyncio.QueueFull:
            self.dropped += 1
            if self.dropped == 1:  # once per call: it goes on for as long as the socket is stuck
                log.warning("call %s: the socket is not taking answer audio: dropping it", self.session_id)

    async def next_out(self) -> Any | None:
        """The next message from voice (not a heartbeat); None once voice has been silent too long."""
        while True:
            if not self._out.empty():
                return self._out.get_nowait()
            remaining = self.last_heard + self.lost_after_s - time.monotonic()
            if remaining <= 0:
                return None
            # asyncio.timeout, not wait_for: wait_for runs the get as a task of its own, one more
            # turn of the event loop per answer frame, and in a host every service's ready work
            # runs in each turn (bench/voice.py --compare-modes, relay out).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    return await self._out.get()


@dataclass(frozen=True)
class Ending:
    """Who ended the call: the caller (``reason`` is the hang-up's), voice (its ``EndOut``),
    nobody answered from voice any more (``lost``), or nothing came from the caller's side any
    more (``silent``: the stream is lost, though its socket may still be open)."""

    by: Literal["caller", "voice", "lost", "silent"]
    reason: str
    message: str = ""


async def run_call(
    relay: VoiceRelay,
    read: Callable[[], Awaitable[str]],
    deliver: Callable[[Any], Awaitable[None]],
) -> Ending:
    """Relay until one side ends. ``read`` relays the socket's frames to voice and returns the
    hang-up reason when the caller is gone; ``deliver`` writes one ``VoiceOut`` to the socket.
    A caller's hang-up is passed on to voice here; the socket is the caller's to close."""

    async def pump() -> Ending:
        while True:
            out = await relay.next_out()
            if out is None:
                return Ending("lost", "voice_lost", "the voice service stopped answering")
            if isinstance(out, EndOut):
                return Ending("voice", out.reason, out.message)
            await deliver(out)

    async def caller() -> Ending:
        return Ending("caller", await read())

    async def silence() -> Ending:
        while (remaining := relay.last_from_caller + relay.media_timeout_s - time.monotonic()) > 0:
            await asyncio.sleep(remaining)  # until the deadline as it stands: audio moves it on
        return Ending("silent", "stream_lost", f"nothing from the caller for {relay.media_timeout_s:g} s")

    tasks = [asyncio.ensure_future(caller()), asyncio.ensure_future(pump()), asyncio.ensure_future(silence())]
    beating = asyncio.ensure_future(relay.heartbeats())
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        ending = _first_ending([t for t in tasks if t in done], relay.session_id)
    finally:
        for task in (*tasks, beating):
            task.cancel()
        await asyncio.gather(*tasks, beating, return_exceptions=True)
    if ending.by in ("caller", "silent"):
        await relay.send(HangupIn(reason=ending.reason))  # voice records the reason and frees the lock
    if ending.by == "silent":
        log.warning("call %s: nothing from the caller for %.1f s: ending it", relay.session_id, relay.media_timeout_s)
    elif ending.by == "lost":
        log.warning("call %s: nothing from voice for %.1f s: ending it", relay.session_id, relay.lost_after_s)
    return ending


def _first_ending(done: list["asyncio.Future[Ending]"], session_id: str) -> Ending:
    for task in done:
        if task.exception() is None:
            return task.result()
    # A socket that failed under us (a write to a vanished peer, say): the caller is gone.
    log.info("call %s: the socket failed: %r", session_id, done[0].exception())
    return Ending("caller", "caller_hangup")
