"""Plain requests through the real SDK: create, retrieve, delete, list, count,
and the HTTP envelope (auth, ids, error shapes)."""

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import ResponseInputMessageItem, ResponseInputText

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"


def test_plain_create_gives_a_deterministic_offline_answer(client: OpenAI, standin: StandinProcess) -> None:
    response = client.responses.create(model=MODEL, instructions="Be brief.", input="What's 2+2?")

    assert response.output_text == "Offline stand-in: I heard “What's 2+2?”."
    assert response.status == "completed"
    assert response.id.startswith("resp_")
    assert response.instructions == "Be brief."
    [message] = response.output
    assert message.type == "message" and message.id.startswith("msg_") and message.role == "assistant"
    usage = response.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens
    assert usage.input_tokens_details.cached_tokens == 0
    assert usage.output_tokens_details.reasoning_tokens == 0
    assert response._request_id and response._request_id.startswith("req_")

    [recorded] = standin.response_requests()
    assert recorded["headers"]["authorization"] == "Bearer sk-standin-test"
    assert recorded["headers"]["x-stainless-retry-count"] == "0"
    assert recorded["body"] == {"model": MODEL, "instructions": "Be brief.", "input": "What's 2+2?"}
    assert recorded["request_id"] == response._request_id
    assert recorded["response_id"] == response.id
    assert recorded["status"] == 200


async def test_async_client_gets_the_same_answer(aclient: AsyncOpenAI) -> None:
    response = await aclient.responses.create(model=MODEL, input=[{"role": "user", "content": "Hi async"}])
    assert response.output_text == "Offline stand-in: I heard “Hi async”."


def test_settings_are_echoed(client: OpenAI) -> None:
    response = client.responses.create(
        model=MODEL, input="echo", metadata={"session": "kitchen-1"}, temperature=0.2, max_output_tokens=500
    )
    assert response.metadata == {"session": "kitchen-1"}
    assert response.temperature == 0.2
    assert response.max_output_tokens == 500
    assert response.model == MODEL


def test_retrieve_list_input_items_and_delete(client: OpenAI) -> None:
    created = client.responses.create(model=MODEL, input="remember me")

    fetched = client.responses.retrieve(created.id)
    assert fetched.id == created.id and fetched.output_text == created.output_text

    items = list(client.responses.input_items.list(created.id))
    assert [i.type for i in items] == ["message"]
    message = items[0]
    assert isinstance(message, ResponseInputMessageItem) and isinstance(message.content[0], ResponseInputText)
    assert message.content[0].text == "remember me"

    client.responses.delete(created.id)  # typed to return None: nothing to check
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(created.id)
    assert isinstance(missing.value.body, dict)
    assert missing.value.body["message"] == f"Response with id '{created.id}' not found."


def test_input_items_pages_with_the_cursor(client: OpenAI, standin: StandinProcess) -> None:
    first = client.responses.create(model=MODEL, input=[{"role": "user", "content": f"m{i}"} for i in range(5)])
    page = client.responses.input_items.list(first.id, limit=2, order="asc")
    texts = [  # iterating walks every page
        item.content[0].text
        for item in page
        if isinstance(item, ResponseInputMessageItem) and isinstance(item.content[0], ResponseInputText)
    ]
    assert texts == ["m0", "m1", "m2", "m3", "m4"]
    assert len(standin.requests(f"/v1/responses/{first.id}/input_items")) == 3


def test_input_token_count_matches_create_usage(client: OpenAI) -> None:
    counted = client.responses.input_tokens.count(model=MODEL, input="count these words please", instructions="x")
    created = client.responses.create(model=MODEL, input="count these words please", instructions="x")
    assert created.usage is not None
    assert counted.input_tokens == created.usage.input_tokens


def test_missing_api_key_is_401_with_openai_shape(standin: StandinProcess) -> None:
    reply = httpx.post(f"{standin.base_url}/responses", json={"model": MODEL, "input": "hi"})
    assert reply.status_code == 401
    assert reply.headers["x-request-id"].startswith("req_")
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("You didn't provide an API key.")
    assert set(error) == {"message", "type", "param", "code"}


def test_invalid_url_json_and_missing_model(standin: StandinProcess) -> None:
    auth = {"Authorization": "Bearer k"}
    unknown = httpx.post(f"{standin.base_url}/nothing-here", headers=auth, json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "Invalid URL (POST /v1/nothing-here)"

    broken = httpx.post(f"{standin.base_url}/responses", headers=auth, content=b"{not json")
    assert broken.status_code == 400
    assert broken.json()["error"]["type"] == "invalid_request_error"

    no_model = httpx.post(f"{standin.base_url}/responses", headers=auth, json={"input": "hi"})
    assert no_model.status_code == 400
    assert no_model.json()["error"] == {
        "message": "Missing required parameter: 'model'.",
        "type": "invalid_request_error",
        "param": "model",
        "code": "missing_required_parameter",
    }
    assert all(r.headers["x-request-id"].startswith("req_") for r in (unknown, broken, no_model))


def test_control_routes_answer_too(standin: StandinProcess) -> None:
    health = httpx.get(f"{standin.root_url}/_standin/health")
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert "x-request-id" in health.headers
