"""One response: its events in order, paced at real time, cancellable.

An audio answer is sent as 100 ms chunks, each a transcript delta (its share of the
words) followed by an audio delta; chunk n leaves at start + n × 100 ms (the first at
once, after a scripted `delay_ms`), or all at once when the pace is `instant`. A
cancel (client `response.cancel`, or speech while `interrupt_response` is on) stops
the deltas first and only then sends the `.done` events, with the item `incomplete`
and `response.done` `cancelled`: nothing of the response follows its `response.done`."""

import asyncio
import base64
import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from delegate.openai_standin.ids import new_call_id, new_id
from delegate.openai_standin.realtime import audio
from delegate.openai_standin.realtime.conversation import Conversation, Item
from delegate.openai_standin.realtime.log import SessionRecord
from delegate.openai_standin.realtime.script import RealtimeStep, RealtimeToolCall
from delegate.openai_standin.realtime.wire import Event, server_event

Pace = Literal["realtime", "instant"]

CHUNK_MS = 100
MS_PER_CHAR = 60
MIN_AUDIO_MS, MAX_AUDIO_MS = 1000, 8000
ARGUMENT_DELTA_CHARS = 32
OUTPUT_AUDIO_TOKENS_PER_S = 20
_STAGES = ("created", "item", "content", "finishing", "done")


class Host(Protocol):
    """The connection a response runs on."""

    conversation: Conversation
    record: SessionRecord

    async def send(self, event: Event) -> None: ...

    def drop(self, reason: str) -> None: ...


@dataclass
class Plan:
    step: RealtimeStep | None
    text: str
    modalities: list[str]
    output_format: dict[str, Any]
    voice: Any
    max_output_tokens: Any
    input_tokens: int
    input_audio_tokens: int = 0
    metadata: Any = None
    speak: bool = False  # render the words with espeak-ng (offline demo) when it is there
    tool_call: RealtimeToolCall | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.tool_call = self.step.tool_call if self.step is not None else None


def audio_ms(text: str) -> int:
    """How long the answer's tone lasts: proportional to the words, 1-8 s."""
    return max(MIN_AUDIO_MS, min(MAX_AUDIO_MS, MS_PER_CHAR * len(text)))


class ResponseRun:
    def __init__(self, host: Host, plan: Plan, pace: Pace) -> None:
        self.host, self.plan, self.pace = host, plan, pace
        self.id = new_id("resp")
        self.item: Item | None = None
        self.stage = "created"
        self.text_sent = ""
        self.audio_sent_ms = 0.0
        self.deltas = 0
        self.announced = False  # response.created is out
        self._task: asyncio.Task[None] | None = None
        self.finished = asyncio.Event()

    @property
    def active(self) -> bool:
        return not self.finished.is_set()

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"realtime-response-{self.id}")

    async def cancel(self, reason: str) -> bool:
        """Stop the deltas and finish as cancelled; False if it had already finished."""
        if self._task is None or not self.active:
            return False
        if self.stage in ("finishing", "done"):
            await self.finished.wait()
            return False
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.host.record.cancels.append(
            {
                "response_id": self.id,
                "reason": reason,
                "at": time.time(),
                "item_id": self.item["id"] if self.item else None,
                "audio_sent_ms": self.audio_sent_ms,
                "deltas_sent": self.deltas,
            }
        )
        if not self.announced:  # cancelled before it began: still a whole response on the wire
            await self._send("response.created", response=self._response("in_progress", None))
        await self._finish("cancelled", {"type": "cancelled", "reason": reason})
        return True

    # -- the events ---------------------------------------------------------

    async def _run(self) -> None:
        plan = self.plan
        try:
            await self._send("response.created", response=self._response("in_progress", None))
            self.announced = True
            await self._send("rate_limits.updated", rate_limits=_rate_limits(plan.input_tokens))
            if plan.tool_call is not None:
                if await self._function_call(plan.tool_call):
                    await self._finish("completed", None)
            elif await self._message():
                await self._finish("completed", None)
        finally:
            if self.stage != "finishing" and self.stage != "done" and not self._cancelling():
                self.finished.set()  # dropped or failed: nothing more will be sent

    def _cancelling(self) -> bool:
        task = self._task
        return task is not None and task.cancelling() > 0

    async def _message(self) -> bool:
        plan = self.plan
        spoken = "audio" in plan.modalities
        content_type = "output_audio" if spoken else "output_text"
        self.item = {
            "id": new_id("item"),
            "object": "realtime.item",
            "type": "message",
            "role": "assistant",
            "status": "in_progress",
            "content": [],
        }
        await self._add_item()
        part: dict[str, Any] = {"type": "audio", "transcript": ""} if spoken else {"type": "text", "text": ""}
        await self._send("response.content_part.added", **self._ids(), part=part)
        self.item["content"] = [{"type": content_type, "transcript" if spoken else "text": ""}]
        self.stage = "content"
        sound = (await audio.speak(plan.text, plan.output_format) if plan.speak else None) if spoken else None
        if spoken and sound is None:
            sound = audio.tone(audio_ms(plan.text), plan.output_format)
        chunk_bytes = int(CHUNK_MS * audio.bytes_per_ms(plan.output_format))
        count = max(1, math.ceil(len(sound) / chunk_bytes)) if sound is not None else _text_chunks(plan.text)
        await self._pause_before_deltas()
        loop = asyncio.get_running_loop()
        start = loop.time()
        facts = self.host.conversation.facts_of(self.item["id"])
        for n in range(count):
            if self._drop_due():
                return False
            if self.pace == "realtime":
                await asyncio.sleep(max(0.0, start + n * CHUNK_MS / 1000 - loop.time()))
            piece = plan.text[len(plan.text) * n // count : len(plan.text) * (n + 1) // count]
            if not spoken:
                self.text_sent += piece
                await self._send("response.output_text.delta", **self._ids(), delta=piece)
                self.deltas += 1
                continue
            assert sound is not None
            if piece:
                self.text_sent += piece
                await self._send("response.output_audio_transcript.delta", **self._ids(), delta=piece)
            chunk = sound[n * chunk_bytes : (n + 1) * chunk_bytes]
            # Counted before the send: a truncate may cite audio that was on its way.
            self.audio_sent_ms += audio.duration_ms(chunk, plan.output_format)
            facts.audio_sent_ms = self.audio_sent_ms
            await self._send("response.output_audio.delta", **self._ids(), delta=base64.b64encode(chunk).decode())
            self.deltas += 1
        return not self._drop_due()

    async def _function_call(self, call: RealtimeToolCall) -> bool:
        arguments = call.arguments_json()
        self.item = {
            "id": new_id("item"),
            "object": "realtime.item",
            "type": "function_call",
            "status": "in_progress",
            "name": call.name,
            "call_id": call.call_id or new_call_id(),
            "arguments": "",
        }
        await self._add_item()
        self.stage = "content"
        await self._pause_before_deltas()
        ids = {"response_id": self.id, "item_id": self.item["id"], "output_index": 0, "call_id": self.item["call_id"]}
        for start in range(0, max(1, len(arguments)), ARGUMENT_DELTA_CHARS):
            if self._drop_due():
                return False
            piece = arguments[start : start + ARGUMENT_DELTA_CHARS]
            self.text_sent += piece
            await self._send("response.function_call_arguments.delta", **ids, delta=piece)
            self.deltas += 1
        return not self._drop_due()

    async def _finish(self, status: str, details: dict[str, Any] | None) -> None:
        self.stage = "finishing"
        try:
            item = self.item
            if item is not None:
                item["status"] = "completed" if status == "completed" else "incomplete"
                if item["type"] == "function_call":
                    item["arguments"] = self.text_sent
                    await self._send(
                        "response.function_call_arguments.done",
                        response_id=self.id,
                        item_id=item["id"],
                        output_index=0,
                        call_id=item["call_id"],
                        name=item["name"],
                        arguments=self.text_sent,
                    )
                elif item["content"]:
                    await self._finish_content(item)
                await self._send("response.output_item.done", response_id=self.id, output_index=0, item=item)
                await self._send("conversation.item.done", item=item, previous_item_id=self._previous_id(item))
            await self._send("response.done", response=self._response(status, details))
        finally:
            self.stage = "done"
            self.finished.set()

    async def _finish_content(self, item: Item) -> None:
        part = item["content"][0]
        if part["type"] == "output_audio":
            part["transcript"] = self.text_sent
            await self._send("response.output_audio.done", **self._ids())
            await self._send("response.output_audio_transcript.done", **self._ids(), transcript=self.text_sent)
            done_part: dict[str, Any] = {"type": "audio", "transcript": self.text_sent}
        else:
            part["text"] = self.text_sent
            await self._send("response.output_text.done", **self._ids(), text=self.text_sent)
            done_part = {"type": "text", "text": self.text_sent}
        await self._send("response.content_part.done", **self._ids(), part=done_part)

    # -- helpers ------------------------------------------------------------

    async def _add_item(self) -> None:
        assert self.item is not None
        previous = self.host.conversation.add(self.item)
        self.stage = "item"
        await self._send("response.output_item.added", response_id=self.id, output_index=0, item=self.item)
        await self._send("conversation.item.added", item=self.item, previous_item_id=previous)

    async def _pause_before_deltas(self) -> None:
        step = self.plan.step
        if step is not None and step.delay_ms:
            await asyncio.sleep(step.delay_ms / 1000)

    def _drop_due(self) -> bool:
        step = self.plan.step
        if step is None or step.disconnect_after_deltas is None or self.deltas < step.disconnect_after_deltas:
            return False
        self.host.drop(f"scripted disconnect after {self.deltas} deltas")
        return True

    def _ids(self) -> dict[str, Any]:
        assert self.item is not None
        return {"response_id": self.id, "item_id": self.item["id"], "output_index": 0, "content_index": 0}

    def _previous_id(self, item: Item) -> str | None:
        items = self.host.conversation.items
        for index, candidate in enumerate(items):
            if candidate is item:
                return items[index - 1]["id"] if index else None
        return None

    async def _send(self, kind: str, **fields: Any) -> None:
        await self.host.send(server_event(kind, **fields))

    def _response(self, status: str, details: dict[str, Any] | None) -> dict[str, Any]:
        plan = self.plan
        done = status != "in_progress"
        return {
            "id": self.id,
            "object": "realtime.response",
            "status": status,
            "status_details": details,
            "output": [self.item] if done and self.item is not None else [],
            "conversation_id": self.host.conversation.id,
            "output_modalities": plan.modalities,
            "max_output_tokens": plan.max_output_tokens,
            "audio": {"output": {"format": plan.output_format, "voice": plan.voice}},
            "usage": self._usage() if done else None,
            "metadata": plan.metadata,
        }

    def _usage(self) -> dict[str, Any]:
        text_tokens = math.ceil(len(self.text_sent) / 4)
        audio_tokens = math.ceil(self.audio_sent_ms / 1000 * OUTPUT_AUDIO_TOKENS_PER_S)
        inputs, input_audio = self.plan.input_tokens, self.plan.input_audio_tokens
        return {
            "total_tokens": inputs + text_tokens + audio_tokens,
            "input_tokens": inputs,
            "output_tokens": text_tokens + audio_tokens,
            "input_token_details": {
                "text_tokens": inputs - input_audio,
                "audio_tokens": input_audio,
                "image_tokens": 0,
                "cached_tokens": 0,
                "cached_tokens_details": {"text_tokens": 0, "audio_tokens": 0, "image_tokens": 0},
            },
            "output_token_details": {"text_tokens": text_tokens, "audio_tokens": audio_tokens},
        }


def _text_chunks(text: str) -> int:
    """A text-only answer keeps the audio answer's rhythm: one delta per 100 ms."""
    return max(1, audio_ms(text) // CHUNK_MS)


def _rate_limits(input_tokens: int) -> list[dict[str, Any]]:
    reserved = input_tokens + 4096
    return [
        {"name": "requests", "limit": 5000, "remaining": 4999, "reset_seconds": 0.012},
        {"name": "tokens", "limit": 800_000, "remaining": 800_000 - reserved, "reset_seconds": 0.5},
    ]
