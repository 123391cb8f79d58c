"""Scripted behaviour: errors, retries, stalls, slow and dropped streams, in-stream
failures, match rules and the control API itself."""

import time

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import ResponseCreatedEvent, ResponseFailedEvent

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"


@pytest.mark.parametrize(
    ("status", "exception", "type_", "code"),
    [
        (400, openai.BadRequestError, "invalid_request_error", None),
        (401, openai.AuthenticationError, "invalid_request_error", "invalid_api_key"),
        (404, openai.NotFoundError, "invalid_request_error", "model_not_found"),
        (429, openai.RateLimitError, "requests", "rate_limit_exceeded"),
        (500, openai.InternalServerError, "server_error", "server_error"),
        (503, openai.InternalServerError, "server_error", "server_is_overloaded"),
    ],
)
def test_scripted_errors_surface_as_sdk_exceptions(
    client: OpenAI, standin: StandinProcess, status: int, exception: type[openai.APIStatusError], type_: str, code: str
) -> None:
    standin.script({"action": "error", "status": status, "message": f"scripted {status}"})
    with pytest.raises(exception) as caught:
        client.responses.create(model=MODEL, input="hi")
    error = caught.value
    assert error.status_code == status
    assert error.message == f"Error code: {status} - scripted {status}"
    assert (error.type, error.code) == (type_, code)
    assert error.request_id and error.request_id.startswith("req_")
    assert client.responses.create(model=MODEL, input="hi").status == "completed"  # one use only


def test_rate_limit_carries_retry_hints(standin: StandinProcess) -> None:
    standin.script({"action": "error", "status": 429, "retry_after_ms": 1500, "retry_after": 2})
    reply = httpx.post(f"{standin.base_url}/responses", headers={"Authorization": "Bearer k"}, json={"model": MODEL})
    assert reply.status_code == 429
    assert reply.headers["retry-after-ms"] == "1500" and reply.headers["retry-after"] == "2"
    assert reply.json()["error"]["code"] == "rate_limit_exceeded"


def test_sdk_retries_rate_limits_then_succeeds(standin: StandinProcess) -> None:
    standin.script({"action": "error", "status": 429, "times": 2})
    started = time.monotonic()
    with standin.client(max_retries=2) as client:
        response = client.responses.create(model=MODEL, input="eventually")
    assert time.monotonic() - started < 2  # honoured the short retry-after-ms, no backoff
    assert response.output_text == "Offline stand-in: I heard “eventually”."
    attempts = standin.response_requests()
    assert [a["headers"]["x-stainless-retry-count"] for a in attempts] == ["0", "1", "2"]
    assert [a["status"] for a in attempts] == [429, 429, 200]
    assert [a["effective_input_tokens"] is None for a in attempts] == [True, True, False]


async def test_async_sdk_gives_up_after_max_retries(standin: StandinProcess) -> None:
    standin.script({"action": "error", "status": 500, "times": 3, "retry_after_ms": 10})
    async with standin.async_client(max_retries=2) as client:
        with pytest.raises(openai.InternalServerError):
            await client.responses.create(model=MODEL, input="never")
    assert [a["status"] for a in standin.response_requests()] == [500, 500, 500]


def test_should_retry_false_stops_the_sdk(standin: StandinProcess) -> None:
    standin.script({"action": "error", "status": 429, "code": "insufficient_quota", "should_retry": False, "times": 3})
    with standin.client(max_retries=2) as client, pytest.raises(openai.RateLimitError) as caught:
        client.responses.create(model=MODEL, input="no money")
    assert caught.value.code == "insufficient_quota"
    assert len(standin.response_requests()) == 1


def test_dropped_stream_raises_on_the_client(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "drop_stream", "after_deltas": 2})
    deltas: list[str] = []
    with pytest.raises(openai.APIConnectionError):
        for event in client.responses.create(model=MODEL, input="one two three four five", stream=True):
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
    assert deltas == ["Offline", " stand-in:"]
    [recorded] = standin.response_requests()
    assert client.responses.retrieve(recorded["response_id"]).status == "incomplete"


async def test_dropped_stream_breaks_the_async_helper(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "drop_stream", "after_deltas": 0})
    with pytest.raises(openai.APIConnectionError):
        async with aclient.responses.stream(model=MODEL, input="drop me") as stream:
            async for _event in stream:
                pass


def test_dropped_plain_reply_is_retried_by_the_sdk(standin: StandinProcess) -> None:
    standin.script({"action": "drop_stream"})
    with standin.client(max_retries=0) as client, pytest.raises(openai.APIConnectionError):
        client.responses.create(model=MODEL, input="lost")
    standin.script({"action": "drop_stream"})
    with standin.client(max_retries=1) as client:
        assert client.responses.create(model=MODEL, input="found").output_text.endswith("“found”.")


def test_stall_makes_the_sdk_time_out(standin: StandinProcess) -> None:
    standin.script({"action": "stall"})
    started = time.monotonic()
    with standin.client(max_retries=0, timeout=0.5) as client, pytest.raises(openai.APITimeoutError):
        client.responses.create(model=MODEL, input="hello?")
    assert time.monotonic() - started < 3
    with standin.client(max_retries=0) as client:  # the server is not blocked by the stalled request
        assert client.responses.create(model=MODEL, input="still up").status == "completed"


async def test_stall_then_retry_succeeds(standin: StandinProcess) -> None:
    standin.script({"action": "stall", "seconds": 30})
    async with standin.async_client(max_retries=1, timeout=0.4) as client:
        response = await client.responses.create(model=MODEL, input="patience")
    assert response.output_text == "Offline stand-in: I heard “patience”."
    assert [a["headers"]["x-stainless-retry-count"] for a in standin.response_requests()] == ["0", "1"]


def test_stall_mid_stream_hits_the_read_timeout(standin: StandinProcess) -> None:
    standin.script({"action": "stall", "after_deltas": 1})
    with standin.client(max_retries=0, timeout=0.5) as client, pytest.raises(openai.APITimeoutError):
        for _event in client.responses.create(model=MODEL, input="slow down", stream=True):
            pass


def test_slow_stream_paces_deltas(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "slow", "delay_ms": 60, "text": "one two three four"})
    started = time.monotonic()
    with client.responses.stream(model=MODEL, input="x") as stream:
        final = stream.get_final_response()
    assert time.monotonic() - started >= 4 * 0.06 * 0.9
    assert final.output_text == "one two three four"


def test_stream_failure_shapes(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "stream_error", "shape": "failed", "after_deltas": 1})
    events = list(client.responses.create(model=MODEL, input="fail", stream=True))
    created, failed = events[0], events[-1]
    assert isinstance(created, ResponseCreatedEvent) and isinstance(failed, ResponseFailedEvent)
    assert failed.response.error is not None and failed.response.error.code == "server_error"
    assert client.responses.retrieve(created.response.id).status == "failed"

    standin.script({"action": "stream_error", "shape": "error", "code": "server_error", "message": "boom"})
    events = list(client.responses.create(model=MODEL, input="fail", stream=True))
    assert events[-1].type == "error" and events[-1].message == "boom"
    assert events[-1].sequence_number == len(events) - 1

    standin.script({"action": "stream_error", "shape": "error_wrapped", "code": "too_many_requests", "message": "slow"})
    with pytest.raises(openai.APIError) as caught:
        for _event in client.responses.create(model=MODEL, input="fail", stream=True):
            pass
    assert caught.value.code == "too_many_requests"


def test_match_rules_pick_steps_out_of_order(client: OpenAI, standin: StandinProcess) -> None:
    standin.script(
        {"action": "text", "text": "weather answer", "match": {"input_contains": "WEATHER"}},
        {"action": "text", "text": "summary answer", "match": {"instructions_contains": "[summary]"}},
        {"action": "text", "text": "streamed answer", "match": {"stream": True}},
        {"action": "text", "text": "anything"},
    )
    assert client.responses.create(model=MODEL, input="hello").output_text == "anything"
    summary = client.responses.create(model=MODEL, instructions="[summary] of the day", input="x")
    assert summary.output_text == "summary answer"
    assert client.responses.create(model=MODEL, input="how's the weather").output_text == "weather answer"
    with client.responses.stream(model=MODEL, input="hi") as stream:
        assert stream.get_final_response().output_text == "streamed answer"
    assert client.responses.create(model=MODEL, input="hello").output_text.startswith("Offline stand-in:")
    assert [r["step"] is not None for r in standin.response_requests()] == [True, True, True, True, False]


def test_invalid_script_is_refused(standin: StandinProcess) -> None:
    with pytest.raises(ValueError, match="txt"):
        standin.script({"action": "text", "txt": "typo"})
    with pytest.raises(ValueError, match="either 'name'"):
        standin.script({"action": "tool_call"})
    reply = httpx.post(f"{standin.root_url}/_standin/script", json=[{"action": "explode"}])
    assert reply.status_code == 422 and reply.json()["error"] == "invalid script"
    assert standin.pending_script() == []


def test_reset_forgets_everything(client: OpenAI, standin: StandinProcess) -> None:
    created = client.responses.create(model=MODEL, input="before reset")
    standin.script({"action": "text", "text": "pending"})
    standin.reset()
    assert standin.requests() == [] and standin.pending_script() == []
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
