"""The stand-in refuses what OpenAI refuses, by OpenAI's own published schemas: the API's
400 (`invalid_request_error` with `param` and `code`) over HTTP, an `error` event over
Realtime, for unknown parameters, wrong types, out-of-range and unsupported values."""

from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from delegate.openai_standin import openapi, strict
from tests.support.standin import RealtimeEvents, StandinProcess

MODEL = "gpt-5.5"


def test_an_unknown_parameter_gets_the_apis_400(client: OpenAI, standin: StandinProcess) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input="hi", extra_body={"foo": 1})

    assert caught.value.status_code == 400
    assert caught.value.body == {
        "message": "Unknown parameter: 'foo'.",
        "type": "invalid_request_error",
        "param": "foo",
        "code": "unknown_parameter",
    }
    [recorded] = standin.response_requests()
    assert recorded["status"] == 400
    assert recorded["response_id"] is None  # refused before the fake model saw it


TOOL = {"type": "function", "name": "notes_create", "parameters": {"type": "object"}, "strict": True}


@pytest.mark.parametrize(
    ("fields", "param", "code", "message"),
    [
        (
            {"input": [{"role": "user", "content": "hi", "name": "ana"}]},
            "input[0].name",
            "unknown_parameter",
            "Unknown parameter: 'input[0].name'.",
        ),
        (
            {"input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x", "b": 1}]}]},
            "input[0].content[0].b",
            "unknown_parameter",
            "Unknown parameter: 'input[0].content[0].b'.",
        ),
        (
            {"tools": [{**TOOL, "function": {"name": "notes_create"}}]},  # the Chat Completions shape
            "tools[0].function",
            "unknown_parameter",
            "Unknown parameter: 'tools[0].function'.",
        ),
        (
            {"reasoning": {"effort": "low", "max_tokens": 10}},
            "reasoning.max_tokens",
            "unknown_parameter",
            "Unknown parameter: 'reasoning.max_tokens'.",
        ),
        (
            {"temperature": 3},
            "temperature",
            "decimal_above_max_value",
            "Invalid 'temperature': decimal above maximum value. Expected a value <= 2, but got 3 instead.",
        ),
        (
            {"max_output_tokens": 5},
            "max_output_tokens",
            "integer_below_min_value",
            "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but got 5 instead.",
        ),
        (
            {"context_management": [{"type": "compaction", "compact_threshold": 200}]},
            "context_management[0].compact_threshold",
            "integer_below_min_value",
            "Invalid 'context_management[0].compact_threshold': integer below minimum value. "
            "Expected a value >= 1000, but got 200 instead.",
        ),
        (
            {"parallel_tool_calls": "yes"},
            "parallel_tool_calls",
            "invalid_type",
            "Invalid type for 'parallel_tool_calls': expected a boolean, but got a string instead.",
        ),
        (
            {"metadata": {"turn": 3}},
            "metadata.turn",
            "invalid_type",
            "Invalid type for 'metadata.turn': expected a string, but got an integer instead.",
        ),
        (
            {"truncation": "sometimes"},
            "truncation",
            "invalid_value",
            "Invalid value: 'sometimes'. Supported values are: 'auto' and 'disabled'.",
        ),
        (
            {"tools": [{"type": "web_search", "search_context_size": "huge"}]},
            "tools[0].search_context_size",
            "invalid_value",
            "Invalid value: 'huge'. Supported values are: 'low', 'medium', and 'high'.",
        ),
        (
            {"text": {"format": {"type": "json_schema", "name": "out"}}},
            "text.format.schema",
            "missing_required_parameter",
            "Missing required parameter: 'text.format.schema'.",
        ),
    ],
)
def test_the_schema_refusals_say_what_the_api_says(
    client: OpenAI, fields: dict[str, Any], param: str, code: str, message: str
) -> None:
    body = {"input": "hi", **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, **body)
    assert caught.value.body == {"message": message, "type": "invalid_request_error", "param": param, "code": code}


def test_an_unknown_item_type_lists_the_supported_ones(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=[{"type": "user_message", "text": "hi"}])  # type: ignore[typeddict-item]  # unknown on purpose
    error = caught.value
    assert error.code == "invalid_value" and error.param == "input[0].type"
    assert str(error.message).startswith("Error code: 400 - Invalid value: 'user_message'. Supported values are: ")
    for kind in ("'message'", "'function_call'", "'function_call_output'", "'compaction'", "'item_reference'"):
        assert kind in str(error.message)


def test_compact_and_input_tokens_are_checked_too(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as compact:
        client.responses.compact(model=MODEL, input="hi", extra_body={"tools": []})
    with pytest.raises(openai.BadRequestError) as count:
        client.responses.input_tokens.count(model=MODEL, input="hi", extra_body={"stream": True})
    assert (compact.value.code, compact.value.param) == ("unknown_parameter", "tools")
    assert (count.value.code, count.value.param) == ("unknown_parameter", "stream")


def test_what_the_spec_allows_in_its_alternatives_passes() -> None:
    # An easy message with `type`, a full item replayed with its ids, a tool output, a
    # compaction item, a web search tool with filters, a json_schema format: every shape
    # reached through the spec's allOf / anyOf chains, with no key outside them.
    body = {
        "model": MODEL,
        "input": [
            {"type": "message", "role": "user", "content": "hi"},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
            {"type": "compaction", "id": "cmp_1", "encrypted_content": "abc"},
        ],
        "tools": [TOOL, {"type": "web_search", "filters": {"allowed_domains": ["example.org"]}}],
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": True}},
        "metadata": {"any key": "is a value"},
        "stream_options": {"include_obfuscation": False},
        "stream": True,
    }
    assert strict.check_body("responses.create", body) is None


def test_the_trimmed_spec_names_its_source_and_keeps_its_licence() -> None:
    source = openapi.spec().source
    assert source["repository"].startswith("https://github.com/openai/openai-openapi")
    assert source["commit"] == "f85dbe2"
    assert source["info.version"] == "2.3.0"
    licence = (openapi.SPEC_FILE.parent / "LICENSE").read_text(encoding="utf-8")
    assert licence.startswith("MIT License") or "Permission is hereby granted, free of charge" in licence


@pytest.mark.parametrize(
    ("event", "param", "code"),
    [
        ({"type": "response.create", "response": {"modalities": ["text"]}}, "response.modalities", "unknown_parameter"),
        (
            {"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"speed": 3}}}},
            "session.audio.output.speed",
            "decimal_above_max_value",
        ),
        ({"type": "session.update", "session": {"instructions": "hi"}}, "session.type", "missing_required_parameter"),
        (
            {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": "hi"}},
            "item.content",
            "invalid_type",
        ),
        (
            {"type": "conversation.item.truncate", "item_id": "item_1", "content_index": 0, "audio_end_ms": "5"},
            "audio_end_ms",
            "invalid_type",
        ),
    ],
)
async def test_a_realtime_event_the_schema_refuses_gets_an_error_event(
    aclient: AsyncOpenAI, event: dict[str, Any], param: str, code: str
) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = RealtimeEvents(conn)
        await events.next()
        await conn.send({**event, "event_id": "evt_bad"})  # type: ignore[arg-type]
        error = (await events.until("error"))["error"]
        await conn.session.update(session={"type": "realtime", "instructions": "still here"})
        updated = await events.until("session.updated")
    assert (error["type"], error["param"], error["code"], error["event_id"]) == (
        "invalid_request_error",
        param,
        code,
        "evt_bad",
    )
    assert updated["session"]["instructions"] == "still here"
