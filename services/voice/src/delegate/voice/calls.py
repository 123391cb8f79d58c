"""One voice call from prepare to end, and the one-at-a-time rule around it.

On the wire a call is still a "session" (``session_id``, ``session.started``, ``session.ended``).

``prepare`` takes the voice lock and pre-warms: the Realtime socket opens while the ledger is
read (caught up, then its resume state), the call's span opens, the model is configured
and may already be saying its greeting, buffered until a stream claims the call with its
one-time token (``attach``). From then on the caller's audio, marks and heartbeats arrive on
``voice_in(sid)`` and everything for the caller leaves on ``voice_out(sid)``.

Whatever ends a call (hang-up, the gateway going silent, the Realtime socket dropping, the
lock lost, nobody attaching in time, shutdown) calls ``request_end`` once; the end then runs one
way: the caller is told (``EndOut``), what was being said is recorded as cut off,
``session.ended`` and ``span.closed`` are written, and the lock is released.

A call Delegate placed with answering machine detection is screened until Twilio's verdict
(``on_answered_by``): the greeting plays, but what the callee says is neither answered nor
recorded as the owner's words. "human" (or "unknown", Twilio's own timeout) ends the screening:
the held words are the owner's and are answered; a machine's are dropped. No verdict at all counts
as a person once Twilio's AMD timeout and a grace for its callback have passed since the stream
attached.

One concept at this length: a call's life from prepare to end, with its single ending path and
its screening of an answering machine; the voicemail and outbound placing are their own modules.
"""

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, get_args

from nats.aio.subscription import Subscription
from openai import AsyncOpenAI

from delegate.contracts import topics
from delegate.contracts.events import (
    Channel,
    ConversationOpened,
    Payload,
    SessionEnded,
    SessionEndReason,
    SessionStarted,
    SpanClosed,
    SpanOpened,
    VoiceSessionType,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.voice import (
    MACHINE_ANSWERS,
    AttachReply,
    AttachSession,
    AudioIn,
    Direction,
    EndOut,
    HangupIn,
    HeartbeatOut,
    MarkIn,
    VoiceKind,
    VoiceOut,
    VoiceStatus,
)
from delegate.runtime.bus import Bus
from delegate.runtime.calendar_now import CalendarNow
from delegate.runtime.metering import Meter
from delegate.runtime.pricing import load_prices
from delegate.runtime.working_context import capsule_through_seq

from .context import CallMemory, session_instructions
from .ledger import LedgerUnavailable, VoiceLedger
from .lock import VoiceLock
from .presets import Preset
from .realtime_session import RealtimeBridge, RealtimeLost
from .recorder import Recorder
from .settings import Settings
from .stale import close_stale_call
from .tools import ToolCaller, realtime_tools

log = logging.getLogger(__name__)

APOLOGY = "Sorry, the call dropped. Please call again."
TWILIO_RING_BUFFER_S = 5  # Twilio may add this to a call's ring Timeout
END_WRITE_TIMEOUT_S = 10.0
WATCH_EVERY_S = 0.2
MAX_EARLY_AUDIO = 500  # caller frames kept while the model's socket is still opening (10 s of phone audio)
# After Twilio's AMD timeout, how long its verdict may still take to reach voice (webhook, gateway
# spool, CHANNELS) before screening ends without it.
AMD_VERDICT_GRACE_S = 5.0
END_REASONS = frozenset(get_args(SessionEndReason))


def end_reason(hangup: str) -> tuple[SessionEndReason, str]:
    """A hang-up's reason as a call's end reason (a Twilio call status goes in the detail)."""
    if hangup in END_REASONS:
        return hangup, ""  # type: ignore[return-value]  # checked against the Literal's values
    return "hangup", hangup


class Call:
    def __init__(
        self,
        settings: Settings,
        bus: Bus,
        ledger: VoiceLedger,
        client: AsyncOpenAI,
        lock: VoiceLock,
        *,
        kind: VoiceKind,
        direction: Direction,
        preset: Preset,
        call_sid: str | None,
        caller: str | None,
        reason: str | None,
        on_change: Callable[[], Awaitable[None]],
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = ledger
        self.lock = lock
        self.kind: VoiceKind = kind
        self.direction: Direction = direction
        self.preset = preset
        self.call_sid = call_sid
        self.caller = caller
        self.reason = reason
        self._on_change = on_change
        self.id = new_id()
        self.token = secrets.token_urlsafe(32)
        self.status: VoiceStatus = "connecting"
        self.started_at: datetime = utcnow()
        self.channel: Channel = "phone" if kind == "phone" else "browser_voice"
        self.type: VoiceSessionType = "phone" if kind == "phone" else "voice"
        self.recorder = Recorder(ledger, lambda: lock.fence, session_id=self.id, channel=self.channel)
        self.tools = ToolCaller(bus, channel=self.channel)
        self.bridge = RealtimeBridge(
            client, model=settings.openai_realtime_model, audio_format="pcmu" if kind == "phone" else "pcm16",
            session_id=self.id, emit=self._emit, recorder=self.recorder, tools=self.tools,
            meter=Meter(None, load_prices(settings.runtime_data_dir)),
        )
        self.connect_done = asyncio.Event()
        self.connect_error: str | None = None
        self._claim_seen = asyncio.Event()  # a stream presented the token (VOICE_PREWARM off waits for it)
        self.done = asyncio.Event()
        # Its end is written and the lock let go: the next call may start (the Realtime socket
        # may still be closing). Set with ``done`` at the latest.
        self.released = asyncio.Event()
        self.attached = False
        self._token_used = False
        self._ready = False
        self._written_start = False
        self._prepared_at = time.monotonic()
        # How long a prepared call waits for its stream. A call we place is held while the phone
        # rings: it ends when the stream attaches (answered) or its status says it was not
        # (busy, no-answer, failed: a hang-up), the ring timeout only the backstop.
        self.claim_within_s = settings.voice_prewarm_timeout_s
        if kind == "phone" and direction == "outbound":
            self.claim_within_s += settings.voice_call_ring_timeout_s + TWILIO_RING_BUFFER_S
        self.recording = asyncio.Event()  # the recorder knows the call's span: events can be written
        self._attached_at: float | None = None
        self._last_in = time.monotonic()
        self._early_audio: list[str] = []
        self._pending_out: list[VoiceOut] = []
        self._end: asyncio.Future[tuple[SessionEndReason, str]] = asyncio.get_running_loop().create_future()
        self._subs: list[Subscription] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._out = topics.voice_out(self.id)
        # Screened until Twilio says who answered (see the module's doc).
        self.screening = (
            kind == "phone" and direction == "outbound" and settings.voice_call_machine_detection != "off"
        )
        if self.screening:
            self.recorder.callee = "held"

    # ---- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        self._subs.append(await self.bus.subscribe(topics.voice_in(self.id), self._on_in))
        self._subs.append(await self.bus.serve(topics.voice_attach(self.id), self._on_attach))
        self._tasks.append(asyncio.create_task(self._main(), name=f"voice-call-{self.id}"))

    @property
    def ending(self) -> bool:
        """Its end was asked for: it is on its way out, nothing can keep it."""
        return self._end.done()

    def request_end(self, reason: SessionEndReason, detail: str = "") -> None:
        if not self._end.done():
            log.info("call %s ending: %s%s", self.id, reason, f" ({detail})" if detail else "")
            self._end.set_result((reason, detail))

    async def _main(self) -> None:
        try:
            if not self.settings.voice_prewarm and not await self._wait_for_claim():
                return
            await self._prewarm()
        except RealtimeLost as exc:
            self.request_end("realtime_lost", str(exc))
        except LedgerUnavailable as exc:
            self.request_end("error", f"the ledger is unavailable: {exc}")
        except Exception as exc:
            log.exception("call %s: pre-warm failed", self.id)
            self.request_end("error", f"pre-warm failed: {exc!r}")
        finally:
            self.connect_done.set()
        if not self._end.done():
            self._tasks.append(asyncio.create_task(self._pump()))
            self._tasks.append(asyncio.create_task(self._watch()))
        await self._ending()

    async def _ending(self) -> None:
        reason, detail = await self._end
        try:
            await self._finish(reason, detail)
        finally:
            self.released.set()
            self.done.set()

    async def _wait_for_claim(self) -> bool:
        """Without pre-warm: nothing opens until a stream claims the call. False: it ended."""
        self.connect_done.set()  # prepare answers at once; the connect happens after the attach
        claimed = asyncio.ensure_future(self._claim_seen.wait())
        waiters: set[asyncio.Future[Any]] = {claimed, self._end}
        try:
            await asyncio.wait(waiters, timeout=self.claim_within_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            claimed.cancel()
        if self._claim_seen.is_set() and not self._end.done():
            return True
        self.request_end("unclaimed", f"no stream attached within {self.claim_within_s:g} s")
        await self._ending()
        return False

    async def _prewarm(self) -> None:
        s = self.settings
        connect = asyncio.create_task(self.bridge.connect(s.voice_connect_timeout_s))
        tools = asyncio.create_task(realtime_tools(self.bus))
        try:
            await self.ledger.wait_caught_up()
            resume = await self.ledger.resume(turn_limit=0)
            self.lock.raise_token(resume.fence_marks.get("voice", 0))
            capsule = resume.capsule
            messages = await self.ledger.recent_messages(
                after_seq=capsule_through_seq(capsule), want=s.voice_recent_turns + 1, last_seq=resume.last_seq
            )
            # Asked while the socket opens: memory and today's calendar cost the caller no wait of their own.
            today = asyncio.ensure_future(
                CalendarNow(self.bus, s.owner_timezone, enabled=bool(s.caldav_url)).ready(utcnow())
            )
            memory = CallMemory.start(
                self.bus, capsule=capsule, messages=messages, max_messages=s.voice_recent_turns,
                max_chars=s.voice_recent_chars, budget_tokens=s.memory_context_tokens,
            )
            try:
                await connect
            except Exception as exc:
                self.connect_error = f"cannot reach the Realtime API: {exc!r}"
                raise RealtimeLost(self.connect_error) from exc
        finally:
            if not connect.done():
                connect.cancel()
        self.connect_done.set()
        await close_stale_call(self.ledger, self.lock.fence, resume.open_span)
        conversation_id = resume.conversation_id
        span_id = new_id()
        self.recorder.start(conversation_id or new_id(), span_id)
        self.recording.set()
        if conversation_id is None:
            self.recorder.write(ConversationOpened(reason=f"{self.type}_session"), in_span=False)
        self.tools.conversation_id, self.tools.span_id = self.recorder.conversation_id, span_id
        self.recorder.write(SpanOpened(type=self.type))
        self.recorder.write(
            SessionStarted(
                type=self.type, session_id=self.id, direction=self.direction, caller=self.caller,
                call_sid=self.call_sid, preset=self.preset.name, model=s.openai_realtime_model,
            )
        )
        self._written_start = True
        given, record = await memory.settle(s.memory_retrieval_wait_ms)
        if record is not None:
            self.recorder.write(record)
        else:
            self._tasks.append(asyncio.create_task(self._late_memory(memory)))
        instructions = session_instructions(
            capsule=capsule, messages=messages, channel=self.channel, preset=self.preset, now=utcnow(),
            max_messages=s.voice_recent_turns, max_chars=s.voice_recent_chars, reason=self.reason, memory=given,
            calendar=await today,
        )
        config = self.bridge.session_config(
            instructions=instructions, tools=await tools, preset=self.preset,
            retention_ratio=s.realtime_retention_ratio, transcribe_model=s.openai_transcribe_model,
            screening=self.screening,
        )
        await self.bridge.configure(config, s.voice_connect_timeout_s)
        greeting = self.preset.greeting
        if greeting:
            await self.bridge.greet(greeting)
        self._ready = True
        if self.recorder.callee == "owner":  # a person's verdict came while the session was configured
            await self.bridge.answer_caller()
        for audio in self._early_audio:
            await self.bridge.append_audio(audio)
        self._early_audio.clear()
        await self._set_status("live" if self.attached else "connecting")
        log.info("call %s (%s, preset %s) pre-warmed", self.id, self.kind, self.preset.name)

    async def _late_memory(self, memory: CallMemory) -> None:
        record = await memory.late()
        if record is not None and not self._end.done():
            self.recorder.write(record)

    async def _pump(self) -> None:
        try:
            await self.bridge.run()
        except RealtimeLost as exc:
            self.request_end("realtime_lost", str(exc))
        except Exception as exc:
            log.exception("call %s: the Realtime bridge failed", self.id)
            self.request_end("error", repr(exc))

    async def _watch(self) -> None:
        """Unclaimed, gone silent, lock lost: the ends nothing announces."""
        s = self.settings
        while not self._end.done():
            now = time.monotonic()
            if self.lock.lost.is_set():
                self.request_end("superseded", "the voice lock could not be renewed")
            elif not self.attached and now - self._prepared_at > self.claim_within_s:
                self.request_end("unclaimed", f"no stream attached within {self.claim_within_s:g} s")
            elif self.attached and now - self._last_in > s.voice_lost_after_s:
                self.request_end("stream_lost", f"nothing from the caller's side for {s.voice_lost_after_s:g} s")
            await asyncio.sleep(WATCH_EVERY_S)

    async def _heartbeat(self) -> None:
        while True:
            await self.bus.emit(self._out, HeartbeatOut())
            await asyncio.sleep(self.settings.voice_heartbeat_s)

    async def _finish(self, reason: SessionEndReason, detail: str) -> None:
        await self._set_status("ending")
        message = APOLOGY if reason in ("realtime_lost", "error", "superseded") else ""
        await self.bus.emit(self._out, EndOut(reason=reason, message=message))
        for task in self._tasks:
            if task is not asyncio.current_task():
                task.cancel()
        for sub in self._subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        if self._written_start:
            self.bridge.finish()
            duration = (utcnow() - self.started_at).total_seconds()
            self.recorder.write(
                SessionEnded(
                    type=self.type, session_id=self.id, reason=reason, duration_s=duration, detail=detail[:2000]
                )
            )
            self.recorder.write(SpanClosed(reason="completed"))
        await self.recorder.close(END_WRITE_TIMEOUT_S)
        # Nothing more is written: the lock goes before the socket's close, so the owner calling
        # straight back waits for none of it.
        await self.lock.release()
        self.released.set()
        await self.bridge.close()
        log.info("call %s ended (%s)", self.id, reason)

    # ---- who answered a call we placed ------------------------------------------------------

    def on_answered_by(self, answered_by: str) -> None:
        """Twilio's AMD verdict: a machine's words are dropped; anything else ends the screening."""
        if not self.screening or self._end.done():
            return
        self.screening = False
        if answered_by in MACHINE_ANSWERS:
            log.info("call %s: a machine answered (%s): its words are not the owner's", self.id, answered_by)
            self.recorder.callee_is("machine")
            return
        log.info("call %s: answered by %s: the callee's words are the owner's", self.id, answered_by)
        self.recorder.callee_is("owner")
        if self._ready:
            self._tasks.append(asyncio.create_task(self.bridge.answer_caller()))

    async def _verdict_backstop(self) -> None:
        """Twilio's verdict never came (its callback lost, or late past its own timeout)."""
        await asyncio.sleep(self.settings.voice_call_amd_timeout_s + AMD_VERDICT_GRACE_S)
        if self.screening:
            log.warning("call %s: no answering machine verdict in time: taken as the owner", self.id)
            self.on_answered_by("unknown")


    def leave_voicemail(
        self, record: Payload, record_id: str, words: str | None, hang_up: Callable[[], Awaitable[None]]
    ) -> None:
        """Record it in the span, say ``words`` (None: nothing), then hang up."""
        if self._end.done():
            return
        self.recorder.write(record, id=record_id)
        self._tasks.append(asyncio.create_task(self._voicemail(words, hang_up)))

    async def _voicemail(self, words: str | None, hang_up: Callable[[], Awaitable[None]]) -> None:
        if words is not None and self._ready:
            before = self.bridge.active_response
            await self.bridge.say_exactly(words)
            if not await self._spoken(before, self.settings.voice_voicemail_max_s):
                log.warning("call %s: the voicemail did not finish playing in time", self.id)
        try:
            await hang_up()
        except Exception as exc:  # our side ends either way; Twilio's side times out
            log.error("call %s: hanging up after the voicemail failed: %r", self.id, exc)
        self.request_end("hangup", "voicemail left" if words is not None else "a machine answered")

    async def _spoken(self, before: str | None, timeout: float) -> bool:
        """The answer after ``before`` was generated and every mark of it echoed (it played)."""
        deadline = time.monotonic() + timeout
        started = False
        while time.monotonic() < deadline:
            active = self.bridge.active_response
            started = started or (active is not None and active != before)
            playing = self.bridge.playout.current
            if started and active is None and (playing is None or not playing.marks):
                return True
            await asyncio.sleep(WATCH_EVERY_S)
        return False

    async def _set_status(self, status: VoiceStatus) -> None:
        if status != self.status:
            self.status = status
            await self._on_change()

    # ---- the caller's side ----------------------------------------------------------------------

    async def _on_attach(self, req: AttachSession) -> AttachReply:
        audio_format = "pcmu" if self.kind == "phone" else "pcm16"
        if self._end.done():
            return AttachReply(ok=False, reason="unknown_session", message="this call is over")
        if self._token_used or not secrets.compare_digest(req.token.encode(), self.token.encode()):
            log.warning("call %s: attach refused (bad or reused token)", self.id)
            return AttachReply(ok=False, reason="bad_token", message="the token is not valid for this call")
        if self.connect_error:
            return AttachReply(ok=False, reason="unavailable", message=self.connect_error)
        self._token_used = True
        self._claim_seen.set()
        self.call_sid = self.call_sid or req.call_sid
        self._last_in = self._attached_at = time.monotonic()
        self.bridge.attached_at = self._attached_at
        self.recorder.heard = True
        self._tasks.append(asyncio.create_task(self._claimed()))
        if self.screening:  # Twilio's detection started when the call was answered, just before this
            self._tasks.append(asyncio.create_task(self._verdict_backstop()))
        log.info("call %s claimed by stream %s (Twilio call %s)", self.id, req.stream_sid, req.call_sid)
        return AttachReply(ok=True, audio_format=audio_format)

    async def _claimed(self) -> None:
        """After the attach reply: flush what the model said before the stream existed, then
        keep telling the gateway voice is alive."""
        while self._pending_out:
            await self.bus.emit(self._out, self._pending_out.pop(0))
        self.attached = True
        self.recorder.flush()
        if self._ready:
            await self._set_status("live")
        await self._heartbeat()

    async def _emit(self, msg: VoiceOut) -> None:
        if not self.attached:
            self._pending_out.append(msg)
            return
        await self.bus.emit(self._out, msg)

    async def _on_in(self, msg: Any) -> None:
        self._last_in = time.monotonic()
        if isinstance(msg, AudioIn):
            if self._ready:
                await self.bridge.append_audio(msg.audio)
            elif len(self._early_audio) < MAX_EARLY_AUDIO:
                self._early_audio.append(msg.audio)
        elif isinstance(msg, MarkIn):
            self.bridge.on_mark(msg.name)
        elif isinstance(msg, HangupIn):
            self.request_end(*end_reason(msg.reason))
