"""One Realtime WebSocket session: the client events and what the server answers.

Client events are handled one at a time, in order; a response runs as its own task
(`ResponseRun`) so audio keeps flowing while the next events arrive. Every server
event goes through `send`, which records its type and when its send began for the log."""

import asyncio
import base64
import binascii
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from delegate.openai_standin import strict
from delegate.openai_standin.ids import new_id
from delegate.openai_standin.realtime import audio, session
from delegate.openai_standin.realtime.answers import answer_text
from delegate.openai_standin.realtime.conversation import Conversation, Item, client_item, message_text
from delegate.openai_standin.realtime.input import InputBuffer
from delegate.openai_standin.realtime.log import SessionRecord
from delegate.openai_standin.realtime.responder import Pace, Plan, ResponseRun
from delegate.openai_standin.realtime.script import RealtimeScript
from delegate.openai_standin.realtime.vad import VadEvent
from delegate.openai_standin.realtime.wire import Event, EventError, error_event, server_event
from delegate.openai_standin.refusals import invalid_value

log = logging.getLogger(__name__)

INPUT_AUDIO_TOKENS_PER_S = 10
ITEM_OVERHEAD_TOKENS = 4

Handler = Callable[[dict[str, Any], str | None], Awaitable[None]]


class RealtimeConnection:
    def __init__(
        self, websocket: WebSocket, config: session.Config, record: SessionRecord, script: RealtimeScript,
        *, pace: Pace, demo: bool, speak: bool,
    ) -> None:  # fmt: skip
        self.websocket = websocket
        self.config = config
        self.record = record
        self.script = script
        self.pace: Pace = pace
        self.demo = demo
        self.speak = speak
        self.conversation = Conversation()
        self.input = InputBuffer(self._input["format"], self._input["turn_detection"])
        self.run: ResponseRun | None = None
        self.audio_started = False
        self.dropped = asyncio.Event()
        self.drop_reason = ""
        self._closed = False
        self._send_lock = asyncio.Lock()
        self._speech_item_id: str | None = None
        self._user_audio_ms = 0.0
        self._handlers: dict[str, Handler] = {
            "session.update": self._session_update,
            "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit,
            "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create,
            "conversation.item.retrieve": self._item_retrieve,
            "conversation.item.delete": self._item_delete,
            "conversation.item.truncate": self._truncate,
            "response.create": self._response_create,
            "response.cancel": self._response_cancel,
            "output_audio_buffer.clear": self._output_clear,
        }

    @property
    def _input(self) -> dict[str, Any]:
        value: dict[str, Any] = self.config["audio"]["input"]
        return value

    # -- wire ---------------------------------------------------------------

    async def send(self, event: Event) -> None:
        if self._closed:
            return
        async with self._send_lock:
            at = time.time()
            try:
                await self.websocket.send_text(json.dumps(event, ensure_ascii=False))
            except (OSError, RuntimeError, WebSocketDisconnect):
                self._closed = True  # the client left; the receive loop ends the session
                return
        self.record.sent_event(event["type"], at)

    def drop(self, reason: str) -> None:
        self.drop_reason = reason
        self._closed = True
        self.dropped.set()

    async def receive_loop(self) -> None:
        while True:
            message = await self.websocket.receive()
            if message["type"] == "websocket.disconnect":
                self._closed = True
                return
            text = message.get("text")
            if text is None and message.get("bytes") is not None:
                text = message["bytes"].decode("utf-8", errors="replace")
            if text is not None:
                await self.handle(text)

    async def handle(self, text: str) -> None:
        try:
            event = json.loads(text)
        except json.JSONDecodeError:
            self.record.received({"invalid_json": text[:200]})
            await self._error(EventError("The event is not valid JSON.", code="invalid_json"), None)
            return
        self.record.received(event)
        event_id = event.get("event_id") if isinstance(event, dict) else None
        event_id = event_id if isinstance(event_id, str) else None
        kind = event.get("type") if isinstance(event, dict) else None
        handler = self._handlers.get(kind) if isinstance(kind, str) else None
        try:
            refusal = strict.check_event(event) if handler else invalid_value(kind, list(self._handlers), "type")
            if refusal is not None:
                raise EventError(refusal.message, code=refusal.code, param=refusal.param)
            assert handler is not None
            await handler(event, event_id)
        except EventError as exc:
            await self._error(exc, event_id)

    async def close(self) -> None:
        self._closed = True
        if self.run is not None and self.run.active:
            await self.run.cancel("client_disconnected")

    async def _error(self, error: EventError, event_id: str | None) -> None:
        await self.send(error_event(error, event_id))

    async def _event(self, kind: str, **fields: Any) -> None:
        await self.send(server_event(kind, **fields))

    # -- session ------------------------------------------------------------

    async def _session_update(self, event: dict[str, Any], _event_id: str | None) -> None:
        refused = self.script.take_session_update()
        if refused is not None:
            raise EventError(refused.message, code=refused.code, kind=refused.type, param="session")
        self.config = session.merged(self.config, event["session"], audio_started=self.audio_started)
        self.input.configure(self._input["format"], self._input["turn_detection"])
        await self._event("session.updated", session=self.config)

    # -- input audio ----------------------------------------------------------

    async def _append(self, event: dict[str, Any], _event_id: str | None) -> None:
        data = _audio_bytes(event["audio"], "audio")
        for vad_event in self.input.append(data):
            await self._on_vad(vad_event)

    async def _on_vad(self, vad_event: VadEvent) -> None:
        turn = self._input["turn_detection"] or {}
        if vad_event.kind == "started":
            self._speech_item_id = new_id("item")
            await self._event(
                "input_audio_buffer.speech_started", audio_start_ms=vad_event.ms, item_id=self._speech_item_id
            )
            if turn.get("interrupt_response", True) and self.run is not None and self.run.active:
                await self.run.cancel("turn_detected")
            return
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = None
        await self._event("input_audio_buffer.speech_stopped", audio_end_ms=vad_event.ms, item_id=item_id)
        await self._commit_turn(item_id, self.input.take(), vad_event.speech_ms, None)
        if turn.get("create_response", True):
            if self.run is not None and self.run.active:
                await self._error(_busy(), None)
            else:
                await self._respond(None, None)

    async def _commit(self, _event: dict[str, Any], event_id: str | None) -> None:
        if self.input.empty():
            raise EventError(
                "Error committing input audio buffer: the buffer is empty.", code="input_audio_buffer_commit_empty"
            )
        data = self.input.take()
        item_id = self._speech_item_id or new_id("item")
        self._speech_item_id = None
        await self._commit_turn(item_id, data, audio.duration_ms(data, self.input.fmt), event_id)

    async def _clear(self, _event: dict[str, Any], _event_id: str | None) -> None:
        self.input.clear()
        self._speech_item_id = None
        await self._event("input_audio_buffer.cleared")

    async def _commit_turn(self, item_id: str, data: bytes, speech_ms: float, _event_id: str | None) -> None:
        item: Item = {
            "id": item_id,
            "object": "realtime.item",
            "type": "message",
            "role": "user",
            "status": "completed",
            "content": [{"type": "input_audio", "transcript": None}],
        }
        previous = self.conversation.add(item)
        self._user_audio_ms += audio.duration_ms(data, self.input.fmt)
        await self._event("input_audio_buffer.committed", item_id=item_id, previous_item_id=previous)
        await self._event("conversation.item.added", item=item, previous_item_id=previous)
        await self._event("conversation.item.done", item=item, previous_item_id=previous)
        facts = self.conversation.facts_of(item_id)
        facts.step = self.script.take()
        scripted = facts.step.transcript if facts.step is not None else None
        facts.heard = scripted if scripted is not None else f"(speech, {speech_ms / 1000:.1f} s)"
        if self._input.get("transcription") is not None:
            item["content"][0]["transcript"] = facts.heard
            await self._event(
                "conversation.item.input_audio_transcription.completed",
                item_id=item_id,
                content_index=0,
                transcript=facts.heard,
                logprobs=None,
                usage={"type": "duration", "seconds": round(speech_ms / 1000, 3)},
            )

    # -- conversation ---------------------------------------------------------

    async def _item_create(self, event: dict[str, Any], _event_id: str | None) -> None:
        item = client_item(event["item"])
        if self.conversation.get(item["id"]) is not None:
            raise EventError(f"Item with id '{item['id']}' already exists.", code="duplicate_item_id", param="item.id")
        for part in item.get("content") or []:
            if part.get("type") == "input_audio" and part.get("audio") is not None:
                self._user_audio_ms += audio.duration_ms(_audio_bytes(part["audio"], "item.content"), self.input.fmt)
                part.pop("audio")  # the server's copies carry no audio bytes
        previous_id = event.get("previous_item_id")
        previous = self.conversation.add(item, previous_id if isinstance(previous_id, str) else None)
        if item["type"] == "message" and item["role"] == "user":
            facts = self.conversation.facts_of(item["id"])
            facts.step = self.script.take()
            facts.heard = message_text(item)
        await self._event("conversation.item.added", item=item, previous_item_id=previous)
        await self._event("conversation.item.done", item=item, previous_item_id=previous)

    async def _item_retrieve(self, event: dict[str, Any], _event_id: str | None) -> None:
        await self._event("conversation.item.retrieved", item=self._known_item(event))

    async def _item_delete(self, event: dict[str, Any], _event_id: str | None) -> None:
        item = self._known_item(event)
        self.conversation.delete(item["id"])
        await self._event("conversation.item.deleted", item_id=item["id"])

    async def _truncate(self, event: dict[str, Any], _event_id: str | None) -> None:
        item = self._known_item(event)
        parts = item.get("content") or []
        if item.get("role") != "assistant" or not parts or parts[0].get("type") != "output_audio":
            raise EventError("Only assistant messages with audio can be truncated.", param="item_id")
        if event.get("content_index", 0) != 0:
            raise EventError("Invalid 'content_index': the audio is content 0.", param="content_index")
        end_ms = event["audio_end_ms"]  # an integer (the spec's), not negative (the API's)
        if end_ms < 0:
            raise EventError("'audio_end_ms' must be a non-negative integer.", param="audio_end_ms")
        sent_ms = self.conversation.facts_of(item["id"]).audio_sent_ms
        if end_ms > sent_ms:
            raise EventError(
                f"Audio content of {math.floor(sent_ms)}ms is already shorter than {end_ms}ms.", param="audio_end_ms"
            )
        parts[0]["transcript"] = ""  # the real API drops the transcript of a truncated item
        self.record.truncations.append({"item_id": item["id"], "audio_end_ms": end_ms, "audio_sent_ms": sent_ms})
        await self._event("conversation.item.truncated", item_id=item["id"], content_index=0, audio_end_ms=end_ms)

    def _known_item(self, event: dict[str, Any]) -> Item:
        item_id = event.get("item_id")
        item = self.conversation.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise EventError(f"Item with item_id '{item_id}' not found.", code="item_not_found", param="item_id")
        return item

    # -- responses ------------------------------------------------------------

    async def _response_create(self, event: dict[str, Any], event_id: str | None) -> None:
        options = event.get("response") or {}
        if self.run is not None and self.run.active:
            raise _busy()
        await self._respond(options, event_id)

    async def _response_cancel(self, event: dict[str, Any], _event_id: str | None) -> None:
        run = self.run
        if run is None or not run.active:
            raise EventError("Cancellation failed: no active response found.", code="response_cancel_not_active")
        wanted = event.get("response_id")
        if wanted is not None and wanted != run.id:
            raise EventError(f"Response with id '{wanted}' is not active.", param="response_id")
        await run.cancel("client_cancelled")

    async def _output_clear(self, _event: dict[str, Any], _event_id: str | None) -> None:
        raise EventError("output_audio_buffer.clear is only supported for WebRTC and SIP sessions.")

    async def _respond(self, options: dict[str, Any] | None, event_id: str | None) -> None:
        options = options or {}
        step = None
        user = self.conversation.last_user_turn()
        if user is not None:
            facts = self.conversation.facts_of(user["id"])
            if not facts.answered:
                facts.answered, step = True, facts.step
        if step is not None and step.error is not None:
            failure = EventError(step.error.message, code=step.error.code, kind=step.error.type)
            await self._error(failure, event_id)
            return
        instructions = options.get("instructions")
        output = (options.get("audio") or {}).get("output") or {}
        fmt = self.config["audio"]["output"]["format"]
        if output.get("format") is not None:
            fmt = session.checked_format(output["format"])
        modalities = options.get("output_modalities") or self.config["output_modalities"]
        if modalities not in (["audio"], ["text"]):
            raise EventError('\'output_modalities\' must be ["audio"] or ["text"].', param="response.output_modalities")
        text = answer_text(
            self.conversation, step, instructions if isinstance(instructions, str) else None, demo=self.demo
        )
        audio_tokens = math.ceil(self._user_audio_ms / 1000 * INPUT_AUDIO_TOKENS_PER_S)
        plan = Plan(
            step=step,
            text=text,
            modalities=list(modalities),
            output_format=fmt,
            voice=output.get("voice", self.config["audio"]["output"]["voice"]),
            max_output_tokens=options.get("max_output_tokens", self.config["max_output_tokens"]),
            input_tokens=self._text_tokens(instructions) + audio_tokens,
            input_audio_tokens=audio_tokens,
            metadata=options.get("metadata"),
            speak=self.speak,
        )
        if "audio" in plan.modalities:
            self.audio_started = True
        self.run = ResponseRun(self, plan, self.pace)
        self.run.start()

    def _text_tokens(self, instructions: Any) -> int:
        text = instructions if isinstance(instructions, str) else self.config.get("instructions") or ""
        total = math.ceil(len(text) / 4)
        if self.config.get("tools"):
            total += math.ceil(len(json.dumps(self.config["tools"])) / 4)
        for item in self.conversation.items:
            words = message_text(item) or str(item.get("arguments") or item.get("output") or "")
            total += ITEM_OVERHEAD_TOKENS + math.ceil(len(words) / 4)
        return total


def _busy() -> EventError:
    return EventError(
        "Conversation already has an active response in progress.",
        code="conversation_already_has_active_response",
    )


def _audio_bytes(value: str, param: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EventError(f"Invalid '{param}': not valid base64.", param=param) from exc
