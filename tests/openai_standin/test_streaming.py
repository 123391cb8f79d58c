"""Server-Sent Events exactly as the SDK's two streaming paths consume them."""

import json
import time

import httpx
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import (
    FunctionToolParam,
    ResponseCompletedEvent,
    ResponseCreatedEvent,
    ResponseOutputItemAddedEvent,
    ResponseTextDoneEvent,
)

from tests.support.standin import StandinProcess, start_standin

MODEL = "gpt-5.5"

TEXT_SEQUENCE_HEAD = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
]
TEXT_SEQUENCE_TAIL = [
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


def test_create_stream_emits_the_documented_sequence(client: OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input="stream this please", stream=True))
    types = [e.type for e in events]

    deltas = [e for e in events if e.type == "response.output_text.delta"]
    assert types == [*TEXT_SEQUENCE_HEAD, *["response.output_text.delta"] * len(deltas), *TEXT_SEQUENCE_TAIL]
    assert len(deltas) >= 5  # word-sized chunks
    assert [e.sequence_number for e in events] == list(range(len(events)))

    created, completed, item_added, text_done = events[0], events[-1], events[2], events[-4]
    assert isinstance(created, ResponseCreatedEvent) and isinstance(completed, ResponseCompletedEvent)
    assert isinstance(item_added, ResponseOutputItemAddedEvent) and isinstance(text_done, ResponseTextDoneEvent)
    assert created.response.status == "in_progress" and created.response.output == []
    assert completed.response.id == created.response.id
    added = item_added.item
    assert added.type == "message" and added.status == "in_progress" and added.content == []
    for event in deltas:
        assert (event.item_id, event.output_index, event.content_index) == (added.id, 0, 0)
        assert event.logprobs == []
    text = "".join(e.delta for e in deltas)
    assert text == "Offline stand-in: I heard “stream this please”."
    assert text_done.text == text
    assert completed.response.output_text == text
    assert completed.response.usage is not None and completed.response.usage.total_tokens > 0


def test_stream_helper_accumulates_the_final_response(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="helper path") as stream:
        seen = [event.type for event in stream]
        final = stream.get_final_response()
    assert seen[0] == "response.created" and seen[-1] == "response.completed"
    assert final.output_text == "Offline stand-in: I heard “helper path”."
    assert final.status == "completed"


async def test_async_stream_both_paths(aclient: AsyncOpenAI) -> None:
    stream = await aclient.responses.create(model=MODEL, input="async raw", stream=True)
    text = "".join([e.delta async for e in stream if e.type == "response.output_text.delta"])
    assert text == "Offline stand-in: I heard “async raw”."

    async with aclient.responses.stream(model=MODEL, input="async helper") as helper:
        async for _event in helper:
            pass
        final = await helper.get_final_response()
    assert final.output_text == "Offline stand-in: I heard “async helper”."


def test_wire_framing_has_event_and_data_lines_and_no_done(standin: StandinProcess) -> None:
    body = {"model": MODEL, "input": "frame", "stream": True}
    with httpx.stream(
        "POST", f"{standin.base_url}/responses", json=body, headers={"Authorization": "Bearer k"}
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.headers["x-request-id"].startswith("req_")
        raw = reply.read().decode()
    blocks = [b for b in raw.split("\n\n") if b]
    assert "[DONE]" not in raw
    for block in blocks:
        event_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        assert event_line == f"event: {data['type']}"
    deltas = [json.loads(b.split("\n")[1][6:]) for b in blocks if "output_text.delta" in b.split("\n")[0]]
    assert all("obfuscation" in d for d in deltas)  # on by default, like the real API


def test_function_call_streams_argument_deltas(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "tool_call", "name": "set_timer", "arguments": {"minutes": 12, "label": "pasta"}})
    tools: list[FunctionToolParam] = [
        {
            "type": "function",
            "name": "set_timer",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"minutes": {"type": "integer"}, "label": {"type": "string"}},
                "required": ["minutes", "label"],
                "additionalProperties": False,
            },
        }
    ]
    with client.responses.stream(model=MODEL, input="timer for pasta", tools=tools) as stream:
        events = list(stream)
        final = stream.get_final_response()

    types = [e.type for e in events]
    arg_deltas = [e for e in events if e.type == "response.function_call_arguments.delta"]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        *["response.function_call_arguments.delta"] * len(arg_deltas),
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    item_added = events[2]
    assert isinstance(item_added, ResponseOutputItemAddedEvent)
    added = item_added.item
    assert added.type == "function_call" and added.arguments == "" and added.status == "in_progress"
    assert "".join(e.delta for e in arg_deltas) == '{"minutes":12,"label":"pasta"}'
    [call] = final.output
    assert call.type == "function_call" and call.id is not None
    assert call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert json.loads(call.arguments) == {"minutes": 12, "label": "pasta"}
    assert call.parsed_arguments == {"minutes": 12, "label": "pasta"}  # strict tool


@pytest.mark.integration
def test_latency_setting_paces_deltas() -> None:
    with start_standin(latency_ms=40) as slow, slow.client(max_retries=0) as client:
        started = time.monotonic()
        events = list(client.responses.create(model=MODEL, input="one two three", stream=True))
        elapsed = time.monotonic() - started
    deltas = sum(e.type == "response.output_text.delta" for e in events)
    assert elapsed >= deltas * 0.04 * 0.9
