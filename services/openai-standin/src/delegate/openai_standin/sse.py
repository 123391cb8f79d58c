"""Server-Sent Event sequences for a response, in the order OpenAI emits them
(openai-wire.md 5.3, 5.4, 5.5, 6.3), and their wire framing."""

import json
import re
import secrets
from typing import Any

from delegate.openai_standin.items import Item
from delegate.openai_standin.shapes import compaction_added, output_text_part

Event = dict[str, Any]

_ARGUMENT_CHUNK = 8


def frame(event: Event) -> bytes:
    """One event: `event:` line, one-line JSON `data:`, blank line."""
    return f"event: {event['type']}\ndata: {json.dumps(event, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def word_chunks(text: str) -> list[str]:
    """Word-sized deltas that concatenate back to exactly `text`."""
    chunks = re.findall(r"\s*\S+", text)
    tail = text[len("".join(chunks)) :]
    if tail:
        chunks.append(tail)
    return chunks


def response_events(
    initial: dict[str, Any], output: list[Item], final: dict[str, Any], *, obfuscate: bool = True
) -> list[Event]:
    events: list[Event] = [
        {"type": "response.created", "response": initial},
        {"type": "response.in_progress", "response": initial},
    ]
    for index, item in enumerate(output):
        events.extend(_item_events(index, item, obfuscate))
    events.append({"type": "response.completed", "response": final})
    return number(events)


def number(events: list[Event], start: int = 0) -> list[Event]:
    return [{"type": e["type"], "sequence_number": start + i, **_without_type(e)} for i, e in enumerate(events)]


def delta_count(output: list[Item]) -> int:
    return sum(is_delta(e) for i, item in enumerate(output) for e in _item_events(i, item, False))


def is_delta(event: Event) -> bool:
    return str(event.get("type", "")).endswith(".delta")


def _item_events(index: int, item: Item, obfuscate: bool) -> list[Event]:
    kind = item.get("type")
    if kind == "message":
        return _message_events(index, item, obfuscate)
    if kind == "function_call":
        return _function_call_events(index, item, obfuscate)
    if kind == "web_search_call":
        return _web_search_events(index, item)
    added = compaction_added(item) if kind == "compaction" else item
    return [
        {"type": "response.output_item.added", "output_index": index, "item": added},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _message_events(index: int, item: Item, obfuscate: bool) -> list[Event]:
    text = "".join(part.get("text", "") for part in item["content"])
    final_part = item["content"][0] if len(item["content"]) == 1 else output_text_part(text)
    annotations = list(final_part.get("annotations") or [])
    ref = {"item_id": item["id"], "output_index": index, "content_index": 0}
    events: list[Event] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "content": []},
        },
        {"type": "response.content_part.added", **ref, "part": output_text_part("")},
    ]
    written, announced = 0, 0
    for chunk in word_chunks(text):
        events.append(_delta("response.output_text.delta", ref, chunk, obfuscate, logprobs=[]))
        written += len(chunk)
        # Each citation is announced as soon as the text it spans has streamed (as observed).
        while announced < len(annotations) and annotations[announced].get("end_index", 0) <= written:
            events.append(_annotation_added(ref, announced, annotations[announced]))
            announced += 1
    events += [_annotation_added(ref, i, annotations[i]) for i in range(announced, len(annotations))]
    events += [
        {"type": "response.output_text.done", **ref, "text": text, "logprobs": []},
        {"type": "response.content_part.done", **ref, "part": final_part},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]
    return events


def _annotation_added(ref: dict[str, Any], index: int, annotation: dict[str, Any]) -> Event:
    return {"type": "response.output_text.annotation.added", **ref, "annotation_index": index, "annotation": annotation}


def _web_search_events(index: int, item: Item) -> list[Event]:
    """added (in progress, query but no sources yet), the three progress events, done."""
    raw_action = item.get("action")
    action: dict[str, Any] = raw_action if isinstance(raw_action, dict) else {}
    started = {key: value for key, value in action.items() if key != "sources"}
    ref = {"item_id": item["id"], "output_index": index}
    return [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "action": started},
        },
        {"type": "response.web_search_call.in_progress", **ref},
        {"type": "response.web_search_call.searching", **ref},
        {"type": "response.web_search_call.completed", **ref},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]


def _function_call_events(index: int, item: Item, obfuscate: bool) -> list[Event]:
    arguments = str(item.get("arguments", ""))
    ref = {"item_id": item["id"], "output_index": index}
    events: list[Event] = [
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": {**item, "status": "in_progress", "arguments": ""},
        }
    ]
    for start in range(0, len(arguments), _ARGUMENT_CHUNK):
        chunk = arguments[start : start + _ARGUMENT_CHUNK]
        events.append(_delta("response.function_call_arguments.delta", ref, chunk, obfuscate))
    events += [
        {"type": "response.function_call_arguments.done", **ref, "arguments": arguments},
        {"type": "response.output_item.done", "output_index": index, "item": item},
    ]
    return events


def _delta(kind: str, ref: dict[str, Any], chunk: str, obfuscate: bool, **extra: Any) -> Event:
    event: Event = {"type": kind, **ref, "delta": chunk, **extra}
    if obfuscate:
        # The real API pads deltas with random characters so that lengths don't leak.
        event["obfuscation"] = secrets.token_urlsafe(12)[: max(1, 16 - len(chunk))]
    return event


def _without_type(event: Event) -> Event:
    return {k: v for k, v in event.items() if k != "type"}
