"""The gateway's side of a voice call, played by the test over the real bus.

``Caller`` prepares and attaches a call as the gateway does, sends the caller's audio at
real-time pace (µ-law frames of 20 ms), and plays the answer like Twilio: a player drains the
queued audio at 8 bytes/ms and echoes each mark once the audio before it has played; a clear
drops the queue and echoes every pending mark at once. It records everything voice sent.
"""

import asyncio
import base64
import math
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, TypeVar

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.contracts.voice import (
    AttachReply,
    AttachSession,
    AudioIn,
    AudioOut,
    ClearOut,
    EndOut,
    HangupIn,
    HeartbeatIn,
    MarkIn,
    MarkOut,
    PrepareReply,
    PrepareSession,
    VoiceKind,
    VoiceState,
    VoiceStateRequest,
)
from delegate.runtime.bus import Bus, BusUnavailable
from tests.support.standin import StandinProcess
from tests.support.waiting import eventually

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

T = TypeVar("T")

FRAME_MS = 20
FRAME_BYTES = 160  # µ-law 8 kHz: 8 bytes per ms
SILENCE = b"\xff" * FRAME_BYTES


def tone_ulaw(ms: int, *, freq: float = 300.0, amplitude: int = 12_000) -> bytes:
    """A loud tone: what the stand-in's energy VAD takes for speech."""
    samples = 8 * ms
    pcm = b"".join(
        int(amplitude * math.sin(2 * math.pi * freq * n / 8000)).to_bytes(2, "little", signed=True)
        for n in range(samples)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return audioop.lin2ulaw(pcm, 2)


# How long the test waits for voice's reply to a prepare or an attach. The gateway waits the
# contract's 5 s; on a machine loaded by two test workers and more, opening the Realtime session
# took longer, and the test failed on a wait, not on what it checks (the reply itself).
REPLY_WAIT_S = 30.0


@dataclass
class Received:
    at: float
    msg: Any


@dataclass
class Caller:
    bus: Bus
    session_id: str = ""
    token: str = ""
    received: list[Received] = field(default_factory=list)
    played_bytes: int = 0
    echoed: list[str] = field(default_factory=list)  # marks echoed because their audio played
    _queue: list[tuple[str, Any]] = field(default_factory=list)
    _tasks: list["asyncio.Task[None]"] = field(default_factory=list)
    _speech: bytearray = field(default_factory=bytearray)  # caller audio still to stream
    _sending: bool = True

    # ---- the gateway's requests -------------------------------------------------------------

    async def prepare(self, kind: VoiceKind = "phone", **fields: Any) -> PrepareReply:
        reply = await self.bus.request(topics.VOICE_PREPARE, PrepareSession(kind=kind, **fields), timeout=REPLY_WAIT_S)
        if reply.ok:
            assert reply.session_id and reply.token
            self.session_id, self.token = reply.session_id, reply.token
        return reply

    async def attach(self, token: str | None = None, *, heartbeat: bool = True) -> AttachReply:
        """Subscribe to the call's output first (as the gateway must), then claim it."""
        if not any(t.get_name() == "out" for t in self._tasks):
            await self.bus.subscribe(topics.voice_out(self.session_id), self._on_out)
            self._tasks.append(asyncio.create_task(self._player(), name="out"))
        reply = await self.bus.request(
            topics.voice_attach(self.session_id),
            AttachSession(token=token or self.token, stream_sid="MZ" + "a" * 32, call_sid="CA" + "b" * 32),
            timeout=REPLY_WAIT_S,
        )
        if reply.ok and heartbeat:
            self._tasks.append(asyncio.create_task(self._heartbeat()))
            self._tasks.append(asyncio.create_task(self._stream()))
        return reply

    async def _heartbeat(self) -> None:
        while True:
            await self.bus.emit(topics.voice_in(self.session_id), HeartbeatIn())
            await asyncio.sleep(1.0)

    async def _stream(self) -> None:
        """Caller audio in 20 ms frames at real-time pace, silence when nobody speaks, as Twilio streams."""
        start = time.monotonic()
        topic = topics.voice_in(self.session_id)
        n = 0
        while self._sending:
            frame = bytes(self._speech[:FRAME_BYTES]).ljust(FRAME_BYTES, b"\xff")
            del self._speech[:FRAME_BYTES]
            msg = AudioIn(audio=base64.b64encode(frame).decode(), ts_ms=n * FRAME_MS, sent_at=time.time())
            await self.bus.emit(topic, msg)
            n += 1
            delay = start + n * FRAME_MS / 1000 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    async def say(self, speech_ms: int = 800, silence_ms: int = 1200) -> None:
        """A loud tone burst, then silence long enough for the VAD to end the turn (returns once streamed)."""
        self._speech += tone_ulaw(speech_ms) + b"\xff" * (8 * silence_ms)
        await eventually(lambda: not self._speech, "the caller's words streamed", timeout=30)

    async def hang_up(self, reason: str = "caller_hangup") -> None:
        self._sending = False
        await self.bus.emit(topics.voice_in(self.session_id), HangupIn(reason=reason))

    # ---- what voice sends, played like Twilio --------------------------------------------------

    async def _on_out(self, msg: Any) -> None:
        self.received.append(Received(time.monotonic(), msg))
        if isinstance(msg, AudioOut):
            self._queue.append(("audio", len(base64.b64decode(msg.audio))))
        elif isinstance(msg, MarkOut):
            self._queue.append(("mark", msg.name))
        elif isinstance(msg, ClearOut):
            pending = [name for kind, name in self._queue if kind == "mark"]
            self._queue.clear()
            for name in pending:  # Twilio echoes every pending mark at once after a clear
                await self.bus.emit(topics.voice_in(self.session_id), MarkIn(name=name))

    async def _player(self) -> None:
        while True:
            await asyncio.sleep(FRAME_MS / 1000)
            budget = FRAME_BYTES
            while self._queue:
                kind, value = self._queue[0]
                if kind == "mark":
                    self._queue.pop(0)
                    self.echoed.append(value)
                    await self.bus.emit(topics.voice_in(self.session_id), MarkIn(name=value))
                    continue
                if budget == 0:
                    break
                take = min(budget, value)
                self.played_bytes += take
                budget -= take
                if take == value:
                    self._queue.pop(0)
                else:
                    self._queue[0] = ("audio", value - take)

    def of(self, kind: type[T]) -> list[T]:
        return [r.msg for r in self.received if isinstance(r.msg, kind)]

    def ended(self) -> EndOut | None:
        ends = self.of(EndOut)
        return ends[0] if ends else None

    async def close(self) -> None:
        self._sending = False
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def session_updates(standin: StandinProcess) -> list[dict[str, Any]]:
    """The ``session.update`` events the Realtime stand-in received, every session, oldest first."""
    return [
        e["session"] for s in standin.realtime_sessions() for e in s["events"] if e.get("type") == "session.update"
    ]


async def voice_state(bus: Bus) -> VoiceState:
    return await bus.request(topics.VOICE_STATE_GET, VoiceStateRequest())


async def ledger_events(bus: Bus, **query: Any) -> list[Event]:
    found: list[Event] = []
    after = 0
    while True:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, limit=1000, **query))
        found += reply.events
        if not reply.more or not reply.events:
            return found
        after = reply.events[-1].seq or after


async def call_events(bus: Bus, session_id: str) -> list[Event]:
    """The events of one call's span, in timeline order (ts, id), asking the ledger for that span
    only: the voice tests share their Systems, and reading the whole ledger on every poll grew
    with each test."""
    starts = await ledger_events(bus, kinds=["session.started"])
    span = next((e.span_id for e in starts if e.payload.get("session_id") == session_id), None)
    if span is None:
        return []
    return sorted(await ledger_events(bus, span_id=span), key=lambda e: (e.ts, e.id))


async def poll_state(bus: Bus, status: str, timeout: float = 15.0) -> VoiceState:
    """The voice state once its status is ``status`` (asked for, not waited on a live subject).

    One unanswered ask (the state's 1 s deadline, passed once by a voice service busy taking a
    call on a loaded machine) is "not yet", not the end of the wait; its deadline still is."""
    last: list[VoiceState | BusUnavailable] = []

    async def state() -> VoiceState | None:
        try:
            last[:] = [await voice_state(bus)]
        except BusUnavailable as exc:
            last[:] = [exc]
            return None
        found = last[0]
        return found if isinstance(found, VoiceState) and found.status == status else None

    return await eventually(state, f"voice state {status}", timeout, interval=0.1, explain=lambda: f"last: {last}")


async def events_until(bus: Bus, session_id: str, kind: str, timeout: float = 20.0) -> list[Event]:
    """The call's committed events once one of ``kind`` is among them."""
    events: list[Event] = []

    async def with_kind() -> list[Event] | None:
        events[:] = await call_events(bus, session_id)
        return list(events) if any(e.kind == kind for e in events) else None

    return await eventually(with_kind, f"a {kind} event in call {session_id}", timeout, interval=0.1,
                            explain=lambda: f"kinds: {[e.kind for e in events]}")
