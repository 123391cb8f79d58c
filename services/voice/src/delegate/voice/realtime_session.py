"""The bridge between one caller and one Realtime session (GA events, through the official SDK).

Caller audio goes to ``input_audio_buffer.append`` unchanged (base64 in, base64 on); the model's
audio deltas go back as ``AudioOut`` chunks, each followed by a mark (``playout``). The model's
own voice activity detection decides when the caller spoke and answers by itself; the bridge
cuts an answer the caller talks over (``Playout.interrupt``), relays captions, runs function
calls through the agent's tool registry, and hands what was said to the recorder.

Events are read raw (``recv_bytes`` + ``json.loads``) and handled as dicts: a few fields of each
are needed, and an unknown event or field must never break a call.

One concept at this length: the Realtime socket's events for one call, read in one loop; the
recorder, playout and tools it hands work to live in their own modules.
"""

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from openai import AsyncOpenAI, OpenAIError
from openai.resources.realtime.realtime import AsyncRealtimeConnection
from websockets.exceptions import ConnectionClosed

from delegate.contracts.events import ContextUsage, VoiceTiming
from delegate.contracts.voice import AudioFormat, AudioOut, ClearOut, MarkOut, TranscriptOut, VoiceOut
from delegate.runtime.metering import Meter, usage_of

from .playout import Playout
from .presets import Preset
from .recorder import Recorder
from .tools import ToolCaller

log = logging.getLogger(__name__)

Emit = Callable[[VoiceOut], Awaitable[None]]

# Bytes of audio per millisecond: G.711 µ-law 8 kHz, PCM16 LE 24 kHz mono.
BYTES_PER_MS = {"pcmu": 8.0, "pcm16": 48.0}
FORMATS: dict[str, dict[str, Any]] = {"pcmu": {"type": "audio/pcmu"}, "pcm16": {"type": "audio/pcm", "rate": 24000}}


class RealtimeLost(Exception):
    """The Realtime socket closed or failed: the session cannot go on."""


class SessionRefused(RealtimeLost):
    """The Realtime API answered our ``session.update`` with an ``error`` (or not in time): the
    session would run on its defaults, and a phone's µ-law heard as 24 kHz PCM is noise."""


def b64_size(data: str) -> int:
    """Decoded length of base64 text without decoding it."""
    return len(data) * 3 // 4 - data[-2:].count("=")


class RealtimeBridge:
    def __init__(
        self,
        client: AsyncOpenAI,
        *,
        model: str,
        audio_format: AudioFormat,
        session_id: str,
        emit: Emit,
        recorder: Recorder,
        tools: ToolCaller,
        meter: Meter,
    ) -> None:
        self.client = client
        self.meter = meter  # prices each response's usage (the recorder writes it)
        self.model = model
        self.audio_format: AudioFormat = audio_format
        self.session_id = session_id
        self.emit = emit
        self.recorder = recorder
        self.tools = tools
        self.conn: AsyncRealtimeConnection | None = None
        self.instructions = ""  # the session's, as configured (a response's own replace them)
        self.playout = Playout(BYTES_PER_MS[audio_format])
        self.active_response: str | None = None
        self.attached_at: float | None = None  # loop time the stream claimed the session
        self._partials: dict[str, list[str]] = {}  # assistant item -> transcript deltas so far
        self._finals: dict[str, str] = {}  # assistant item -> its transcript, until its response is done
        self._cut: set[str] = set()  # assistant items cut by a barge-in (their words are recorded)
        self._greetings: set[str] = set()
        self._greeting_pending = False
        self._speech_stopped_at: float | None = None
        self._trigger: dict[str, float | None] = {}  # response -> speech_stopped time that caused it
        self._first_audio: dict[str, float] = {}
        self._calls: dict[str, dict[str, asyncio.Task[str]]] = {}  # response -> call_id -> running call
        self._tasks: set[asyncio.Task[None]] = set()
        # Screening a call we placed until Twilio says who answered: the model's VAD still takes
        # turns (and cuts the greeting when the callee talks over it) but answers none of them.
        self._turn_detection: dict[str, Any] = {}
        self._screening = False
        self._unanswered = False  # a caller turn was committed after the last response began
        self._answer_after = False  # screening ended during a response: answer the held turn after it

    # ---- setting up ------------------------------------------------------------------------

    async def connect(self, timeout: float) -> None:
        self.conn = await asyncio.wait_for(self.meter.realtime(self.client, self.model).enter(), timeout)

    def session_config(self, *, instructions: str, tools: list[dict[str, Any]], preset: Preset,
                       retention_ratio: float, transcribe_model: str, screening: bool = False) -> dict[str, Any]:
        """``screening``: answer no caller turn until ``answer_caller`` (a machine may have answered)."""
        audio = FORMATS[self.audio_format]
        self._turn_detection = preset.vad.turn_detection()
        self._screening = screening
        config: dict[str, Any] = {
            "type": "realtime",
            "instructions": instructions,
            "output_modalities": ["audio"],
            "audio": {
                "input": {
                    "format": audio,
                    "transcription": {"model": transcribe_model},
                    "turn_detection": {**self._turn_detection, "create_response": False}
                    if screening else self._turn_detection,
                },
                "output": {"format": audio, "voice": preset.voice},
            },
            "truncation": {"type": "retention_ratio", "retention_ratio": retention_ratio},
        }
        if tools:
            config["tools"] = tools
            config["tool_choice"] = "auto"
        return config

    async def configure(self, config: dict[str, Any], timeout: float) -> None:
        """Send ``session.update`` and wait for ``session.updated``: ``SessionRefused`` if an
        ``error`` answers it instead, or nothing does within ``timeout``. Events before the answer
        are handled as usual."""
        self.instructions = str(config.get("instructions") or "")
        event_id = f"configure_{self.session_id}"
        await self._send({"type": "session.update", "event_id": event_id, "session": config})
        try:
            async with asyncio.timeout(timeout):
                while True:
                    event = await self._receive()
                    kind = event.get("type")
                    if kind == "session.updated":
                        return
                    if kind == "error":
                        # Nothing else was sent yet: whatever failed, the session is not ours.
                        error = event.get("error") or {}
                        code = error.get("code") or error.get("type")
                        raise SessionRefused(
                            f"the Realtime API refused the session configuration ({code}: {error.get('message')})"
                        )
                    await self._handle(event)
        except TimeoutError:
            raise SessionRefused(f"no session.updated within {timeout:g} s of the session.update") from None

    async def greet(self, greeting: str) -> None:
        """Have the model say the greeting now; its audio waits for the stream if none is there yet.

        A response's ``instructions`` replace the session's for that response, so the persona and
        context go along, the greeting's words after them."""
        self._greeting_pending = True
        instructions = f'{self.instructions}\n\nNow greet the caller by saying exactly: "{greeting}"'.lstrip()
        await self._send({"type": "response.create", "response": {"instructions": instructions}})

    async def say_exactly(self, text: str) -> None:
        """Cut what is being said, then say ``text`` word for word (a voicemail after the beep)."""
        await self._barge_in()
        if self.active_response is not None:
            await self._send({"type": "response.cancel"})
        await self._send({"type": "response.create", "response": {"instructions": f'Say exactly: "{text}"'}})

    async def answer_caller(self) -> None:
        """The end of screening: a person answered. The model answers turns by itself again, and
        the turn it heard meanwhile now (after the response being said, if one is)."""
        if not self._screening:
            return
        self._screening = False
        await self._send(
            {"type": "session.update",
             "session": {"type": "realtime", "audio": {"input": {"turn_detection": self._turn_detection}}}}
        )
        if self._unanswered:
            if self.active_response is None:
                await self._send({"type": "response.create"})
            else:  # one at a time: the held turn is answered once this response is done
                self._answer_after = True

    # ---- caller -> model -------------------------------------------------------------------

    async def append_audio(self, audio: str) -> None:
        if self.conn is None:
            return
        try:
            # The same JSON as ``conn.input_audio_buffer.append(audio=...)``, which first runs the
            # dict through the SDK's transform against the union of every client event's type:
            # ~130 µs a caller frame, 50 frames a second, on the loop that relays the answers.
            await self.conn.send_raw(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
        except (ConnectionClosed, OSError, OpenAIError) as exc:
            log.debug("audio not sent: %r", exc)  # the pump sees the loss and ends the session

    def on_mark(self, name: str) -> None:
        self.playout.on_mark(name)

    # ---- model -> caller -------------------------------------------------------------------

    async def run(self) -> None:
        """Handle the model's events until its socket closes (``RealtimeLost``)."""
        while True:
            await self._handle(await self._receive())

    async def _receive(self) -> dict[str, Any]:
        """The model's next event (frames that are not a JSON object are skipped)."""
        assert self.conn is not None
        try:
            while True:
                raw = await self.conn.recv_bytes()
                try:
                    event = json.loads(raw)
                except json.JSONDecodeError:
                    log.warning("unreadable Realtime frame (%d bytes) ignored", len(raw))
                    continue
                if isinstance(event, dict):
                    return event
        except (ConnectionClosed, OSError, OpenAIError) as exc:
            raise RealtimeLost(f"the Realtime socket closed: {exc!r}") from exc

    async def _handle(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        if kind == "response.output_audio.delta":
            await self._audio(event)
        elif kind == "response.output_audio_transcript.delta":
            await self._transcript_delta(event)
        elif kind == "input_audio_buffer.speech_started":
            await self._barge_in()
        elif kind == "input_audio_buffer.speech_stopped":
            self._speech_stopped_at = time.monotonic()
        elif kind in ("conversation.item.added", "conversation.item.created", "response.output_item.added"):
            self._item(event.get("item") or {})
        elif kind == "input_audio_buffer.committed":
            self._unanswered = True
            if event.get("item_id"):
                self.recorder.add_item(str(event["item_id"]), "user")
        elif kind == "conversation.item.input_audio_transcription.completed":
            text = str(event.get("transcript") or "")
            self.recorder.said(str(event.get("item_id")), "user", text)
            if text.strip():
                await self.emit(TranscriptOut(role="user", text=text[:20_000], final=True))
        elif kind == "conversation.item.input_audio_transcription.failed":
            self.recorder.said(str(event.get("item_id")), "user", None)
        elif kind == "response.output_audio_transcript.done":
            await self._transcript_done(event)
        elif kind == "response.created":
            response_id = (event.get("response") or {}).get("id")
            if response_id:
                self.active_response = response_id
                self._unanswered = False
                self._trigger[response_id] = self._speech_stopped_at
                self._speech_stopped_at = None
                if self._greeting_pending:
                    self._greeting_pending = False
                    self._greetings.add(response_id)
        elif kind == "response.function_call_arguments.done":
            self._start_call(event.get("response_id"), event.get("call_id"), event.get("name"), event.get("arguments"))
        elif kind == "response.output_item.done":
            item = event.get("item") or {}
            if item.get("type") == "function_call":
                self._start_call(event.get("response_id"), item.get("call_id"), item.get("name"), item.get("arguments"))
        elif kind == "response.done":
            await self._response_done(event.get("response") or {})
        elif kind == "error":
            error = event.get("error") or {}
            code = error.get("code") or error.get("type")
            # A cancel racing the server's own (it cancels on speech itself) is expected.
            level = logging.INFO if code == "response_cancel_not_active" else logging.WARNING
            log.log(level, "Realtime error %s: %s", code, error.get("message"))

    def _item(self, item: dict[str, Any]) -> None:
        if item.get("type") == "message" and item.get("role") in ("user", "assistant") and item.get("id"):
            self.recorder.add_item(str(item["id"]), item["role"])

    async def _audio(self, event: dict[str, Any]) -> None:
        delta = event.get("delta")
        item_id = event.get("item_id")
        if not isinstance(delta, str) or not delta or not item_id:
            return
        response_id = event.get("response_id")
        mark = self.playout.on_audio(item_id, response_id, b64_size(delta))
        if mark is None:
            return  # a cancelled answer: not one frame of it after the clear
        if response_id and response_id not in self._first_audio:
            self._first_audio[response_id] = time.monotonic()
        self.recorder.audio_out()
        await self.emit(AudioOut(audio=delta, sent_at=time.time()))
        await self.emit(MarkOut(name=mark))
        # A publish only queues the frame for the NATS client's flusher task, and the events the
        # model sent behind this delta are read without a pause when they are waiting already (an
        # answer's last delta comes with its done events, whose bookkeeping writes to the ledger):
        # let the flusher send the audio first. bench/voice.py: the last delta of each answer was
        # the slowest frame of the relay, 2-5 ms against ~1.2 ms.
        await asyncio.sleep(0)

    async def _transcript_delta(self, event: dict[str, Any]) -> None:
        item_id, delta = event.get("item_id"), event.get("delta")
        if not item_id or not isinstance(delta, str) or self.playout.is_cancelled(event.get("response_id")):
            return
        self._partials.setdefault(item_id, []).append(delta)
        await self.emit(TranscriptOut(role="assistant", text="".join(self._partials[item_id])[:20_000], final=False))

    async def _transcript_done(self, event: dict[str, Any]) -> None:
        """The caption is final now; the message waits for ``response.done``, which says whether
        the answer was completed or cut (a cut answer's transcript arrives like a whole one)."""
        item_id = event.get("item_id")
        if not item_id or item_id in self._cut:
            return
        text = str(event.get("transcript") or "".join(self._partials.get(item_id, [])))
        self._finals[item_id] = text
        if text.strip():
            await self.emit(TranscriptOut(role="assistant", text=text[:20_000], final=True))

    def _words(self, item_id: str) -> str:
        """What the model said of the item: its final transcript, else the deltas so far."""
        parts = self._partials.pop(item_id, [])
        return self._finals.pop(item_id, None) or "".join(parts)

    def _greeting_meta(self, response_id: Any) -> dict[str, Any]:
        return {"greeting": True} if response_id in self._greetings else {}

    async def _barge_in(self) -> None:
        cut = self.playout.interrupt(self.active_response)
        if cut is None:
            return
        await self.emit(ClearOut())
        if cut.response_id is not None and cut.response_id == self.active_response:
            await self._send({"type": "response.cancel"})
        await self._send(
            {"type": "conversation.item.truncate", "item_id": cut.item_id, "content_index": 0,
             "audio_end_ms": cut.audio_end_ms}
        )
        log.info("barge-in: cut %s at %d ms (played %.0f of %.0f ms sent)",
                 cut.item_id, cut.audio_end_ms, cut.played_ms, cut.sent_ms)
        self._cut.add(cut.item_id)
        self.recorder.said(cut.item_id, "assistant", self._words(cut.item_id), interrupted=True,
                           played_ms=int(cut.played_ms), **self._greeting_meta(cut.response_id))

    # ---- responses, tools, usage ------------------------------------------------------------

    def _start_call(self, response_id: Any, call_id: Any, name: Any, arguments: Any) -> None:
        if not (isinstance(response_id, str) and isinstance(call_id, str) and isinstance(name, str)):
            return
        calls = self._calls.setdefault(response_id, {})
        if call_id not in calls:
            calls[call_id] = asyncio.create_task(self.tools.call(name, str(arguments or ""), call_id))

    async def _response_done(self, response: dict[str, Any]) -> None:
        response_id = response.get("id")
        status = response.get("status")
        if response_id == self.active_response:
            self.active_response = None
            if self._answer_after:
                self._answer_after = False
                if self._unanswered:
                    self._spawn(self._send({"type": "response.create"}))
        said: list[tuple[str, str, dict[str, Any]]] = []  # item, words, meta
        for item in response.get("output") or []:
            item_id = item.get("id")
            if item.get("type") != "message" or not item_id or item_id in self._cut:
                continue
            playing = self.playout.current
            if status == "cancelled" and playing is not None and playing.item_id == item_id and playing.marks:
                # The server cut it as the caller spoke (its speech_started may still be on the
                # way): clear and truncate now, recording what was heard.
                await self._barge_in()
                continue
            meta: dict[str, Any] = {"interrupted": True} if status != "completed" else {}
            played = self.playout.played_ms(item_id)
            if meta and played is not None:
                meta["played_ms"] = int(played)
            said.append((item_id, self._words(item_id), {**meta, **self._greeting_meta(response_id)}))
        usage = response.get("usage")
        timing = self._timing(response_id, status) if isinstance(response_id, str) else None
        # What the answer's records need is taken now; they are made once its last audio has gone.
        self.recorder.after_audio(lambda: self._record_response(response_id, status, said, usage, timing))
        if isinstance(response_id, str):
            calls = self._calls.pop(response_id, None)
            if calls:
                self._spawn(self._answer_calls(calls, resume=status == "completed"))

    def _record_response(self, response_id: Any, status: Any, said: list[tuple[str, str, dict[str, Any]]],
                         usage: Any, timing: VoiceTiming | None) -> None:
        for item_id, words, meta in said:
            self.recorder.said(item_id, "assistant", words, **meta)
        if isinstance(usage, dict) and usage.get("input_tokens") is not None:
            details = usage.get("input_token_details") or {}
            self.recorder.write(
                ContextUsage(
                    response_id=response_id, input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0),
                    total_tokens=int(usage.get("total_tokens") or 0),
                    cached_tokens=int(details.get("cached_tokens") or 0),
                )
            )
            # One model.usage per response.done: a Realtime session bills per response.
            self.recorder.write(self.meter.priced(
                "voice", self.session_id, self.model, usage_of(usage),
                response_id=response_id if isinstance(response_id, str) else None, failed=status == "failed",
            ))
        if timing is not None:
            self.recorder.write(timing)

    def _timing(self, response_id: str, status: Any) -> VoiceTiming | None:
        first = self._first_audio.pop(response_id, None)
        trigger = self._trigger.pop(response_id, None)
        if first is None:
            return None
        greeting = response_id in self._greetings
        stopped_ms = (first - trigger) * 1000 if trigger is not None and not greeting else None
        start_ms = None
        if greeting:
            start_ms = max(0.0, (first - self.attached_at) * 1000) if self.attached_at is not None else 0.0
        return VoiceTiming(
            session_id=self.session_id, response_id=response_id[:64],
            speech_stopped_to_first_audio_ms=max(stopped_ms, 0.0) if stopped_ms is not None else None,
            start_to_first_audio_ms=start_ms, interrupted=status == "cancelled",
        )

    async def _answer_calls(self, calls: dict[str, asyncio.Task[str]], *, resume: bool) -> None:
        """Give the model every output of the response's calls, then let it go on (the model does
        not continue by itself after a tool result)."""
        for call_id, task in calls.items():
            output = await task
            await self._send(
                {"type": "conversation.item.create",
                 "item": {"type": "function_call_output", "call_id": call_id, "output": output}}
            )
        if resume:
            await self._send({"type": "response.create"})

    # ---- plumbing ------------------------------------------------------------------------------

    def finish(self) -> None:
        """What was being said when the session ended: recorded as cut off."""
        for item_id in list({**self._partials, **self._finals}):
            if item_id not in self._cut and self.recorder.has_item(item_id):
                self.recorder.said(item_id, "assistant", self._words(item_id), interrupted=True,
                                   played_ms=int(self.playout.played_ms(item_id) or 0))
        self._partials.clear()
        self._finals.clear()
        self.recorder.flush(final=True)

    async def _send(self, event: dict[str, Any]) -> None:
        if self.conn is None:
            return
        try:
            await self.conn.send(event)  # type: ignore[arg-type]  # a plain dict of a GA client event
        except (ConnectionClosed, OSError, OpenAIError) as exc:
            log.debug("%s not sent: %r", event.get("type"), exc)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task: asyncio.Task[None] = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        for calls in self._calls.values():
            for call in calls.values():
                call.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.conn is not None:
            try:
                await asyncio.wait_for(self.conn.close(), 2.0)
            except Exception as exc:
                log.debug("closing the Realtime socket: %r", exc)
