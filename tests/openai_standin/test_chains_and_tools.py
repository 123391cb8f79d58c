"""`previous_response_id` chains and the function-calling round trip."""

import json
from typing import Any

import openai
import pytest
from openai import OpenAI
from openai.types.responses import FunctionToolParam, ResponseInputParam
from pydantic import BaseModel

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"

WEATHER_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
TIME_TOOL: FunctionToolParam = {**WEATHER_TOOL, "name": "get_time", "description": "Local time in a city"}


def test_three_turn_chain_grows_usage(client: OpenAI, standin: StandinProcess) -> None:
    first = client.responses.create(model=MODEL, input="My name is Ana.")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="I live in Porto.")
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="What do you know?")

    usages = [u.input_tokens for u in (first.usage, second.usage, third.usage) if u is not None]
    assert len(usages) == 3
    assert usages[0] < usages[1] < usages[2]
    assert third.previous_response_id == second.id
    assert third.output_text == "Offline stand-in: I heard “What do you know?”."

    recorded = standin.response_requests()
    assert [r["previous_response_id"] for r in recorded] == [None, first.id, second.id]
    assert [r["effective_input_tokens"] for r in recorded] == usages
    assert [r["compacted"] for r in recorded] == [False, False, False]

    items = list(client.responses.input_items.list(third.id, order="asc"))
    assert [(i.type, getattr(i, "role", None)) for i in items] == [
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
        ("message", "assistant"),
        ("message", "user"),
    ]


def test_long_chains_report_cached_tokens(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="x" * 6000)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="and?")
    assert first.usage is not None and second.usage is not None
    cached = second.usage.input_tokens_details.cached_tokens
    assert 1024 <= cached <= first.usage.input_tokens and cached % 128 == 0


def test_instructions_are_not_inherited(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, instructions="Talk like a pirate. " * 20, input="hi")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="again")
    assert second.instructions is None
    assert second.usage is not None and first.usage is not None
    assert second.usage.input_tokens < first.usage.input_tokens


def test_unknown_previous_response_is_a_400_with_openai_code(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, previous_response_id="resp_does_not_exist", input="hi")
    error = caught.value
    assert error.status_code == 400
    assert error.code == "previous_response_not_found"
    assert error.param == "previous_response_id"
    assert error.type == "invalid_request_error"
    assert isinstance(error.body, dict)
    assert error.body["message"] == "Previous response with id 'resp_does_not_exist' not found."
    assert error.request_id and error.request_id.startswith("req_")


def test_unstored_responses_cannot_be_chained_or_fetched(client: OpenAI) -> None:
    loose = client.responses.create(model=MODEL, input="forget me", store=False)
    assert loose.output_text == "Offline stand-in: I heard “forget me”."
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, previous_response_id=loose.id, input="next")
    assert caught.value.code == "previous_response_not_found"
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(loose.id)


def test_scripted_tool_call_and_continuation(client: OpenAI, standin: StandinProcess) -> None:
    standin.script(
        {
            "action": "tool_call",
            "name": "get_weather",
            "arguments": {"city": "Berlin"},
            "match": {"input_contains": "weather"},
        },
        {"action": "text", "text": "It is 21 °C in Berlin.", "match": {"has_tool_output": True}},
    )
    first = client.responses.create(model=MODEL, input="What's the weather in Berlin?", tools=[WEATHER_TOOL])
    [call] = first.output
    assert call.type == "function_call"
    assert call.id is not None and call.id.startswith("fc_") and call.call_id.startswith("call_")
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Berlin"}
    assert first.output_text == ""

    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        tools=[WEATHER_TOOL],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": '{"temp_c": 21}'}],
    )
    assert second.output_text == "It is 21 °C in Berlin."
    assert standin.pending_script() == []


def test_default_answer_after_tool_output_mentions_the_result(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "tool_call", "name": "get_weather", "arguments": {"city": "Oslo"}})
    first = client.responses.create(model=MODEL, input="weather in Oslo", tools=[WEATHER_TOOL])
    call = first.output[0]
    assert call.type == "function_call"
    call_id = call.call_id
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call_id, "output": "snow, -3 °C"}],
    )
    assert second.output_text == "Offline stand-in: get_weather returned “snow, -3 °C”."


def test_parallel_calls_each_need_an_output(client: OpenAI, standin: StandinProcess) -> None:
    standin.script(
        {
            "action": "tool_call",
            "calls": [
                {"name": "get_weather", "arguments": {"city": "Rome"}, "call_id": "call_weather_rome"},
                {"name": "get_time", "arguments": {"city": "Rome"}},
            ],
        }
    )
    first = client.responses.create(model=MODEL, input="weather and time in Rome", tools=[WEATHER_TOOL, TIME_TOOL])
    calls = [item for item in first.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather", "get_time"]
    assert calls[0].call_id == "call_weather_rome"
    assert calls[0].id != calls[1].id

    one_output: ResponseInputParam = [
        {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny"}
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, previous_response_id=first.id, input=one_output)
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == f"No tool output found for function call {calls[1].call_id}."
    assert caught.value.param == "input"

    both: ResponseInputParam = [
        *one_output, {"type": "function_call_output", "call_id": calls[1].call_id, "output": "14:00"}
    ]
    done = client.responses.create(model=MODEL, previous_response_id=first.id, input=both)
    assert done.output_text == "Offline stand-in: get_weather returned “sunny”; get_time returned “14:00”."


def test_output_for_an_unknown_call_is_rejected(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="hello")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            previous_response_id=first.id,
            input=[{"type": "function_call_output", "call_id": "call_nope", "output": "x"}],
        )
    assert caught.value.body == {
        "message": "No tool call found for function call output with call_id call_nope.",
        "type": "invalid_request_error",
        "param": "input",
        "code": None,
    }


def test_new_user_turn_without_tool_output_is_rejected(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "tool_call", "name": "get_weather", "arguments": {"city": "Lima"}})
    first = client.responses.create(model=MODEL, input="weather Lima", tools=[WEATHER_TOOL])
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, previous_response_id=first.id, input="never mind")
    assert "No tool output found for function call" in caught.value.message


def test_stateless_round_trip_resends_the_call_item(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "tool_call", "name": "get_weather", "arguments": {"city": "Kyiv"}})
    history: list[Any] = [{"role": "user", "content": "weather Kyiv"}]
    first = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL], store=False)
    history += [item.model_dump(exclude_none=True) for item in first.output]
    call = first.output[0]
    assert call.type == "function_call"
    history.append({"type": "function_call_output", "call_id": call.call_id, "output": "rain"})
    second = client.responses.create(model=MODEL, input=history, tools=[WEATHER_TOOL], store=False)
    assert second.output_text == "Offline stand-in: get_weather returned “rain”."


def test_forced_tool_choice_calls_with_schema_valid_arguments(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL,
        input="Berlin please",
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    [call] = response.output
    assert call.type == "function_call" and json.loads(call.arguments) == {"city": "Berlin please"}


class Reminder(BaseModel):
    text: str
    minutes: int
    urgent: bool


def test_structured_output_parses(client: OpenAI) -> None:
    parsed = client.responses.parse(model=MODEL, input="remind me", text_format=Reminder)
    assert isinstance(parsed.output_parsed, Reminder)
    assert parsed.output_parsed.minutes == 0
