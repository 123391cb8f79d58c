"""Compaction: the server-side pass, the explicit trigger, and the standalone endpoint."""

from typing import Any

import openai
import pytest
from openai import AsyncOpenAI, OpenAI
from openai.types.responses import ResponseCompactionItem, ResponseUsage
from openai.types.responses.response_create_params import ContextManagement

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"
THRESHOLD = 1000  # the API's minimum
CONTEXT: list[ContextManagement] = [{"type": "compaction", "compact_threshold": THRESHOLD}]
LONG = "Please keep in mind that the kitchen renovation starts on Monday and the plumber arrives at nine. " * 24


def input_tokens(usage: ResponseUsage | None) -> int:
    assert usage is not None  # the stand-in reports usage on every response
    return usage.input_tokens


def test_server_side_compaction_shrinks_the_chain(client: OpenAI, standin: StandinProcess) -> None:
    first = client.responses.create(model=MODEL, input=LONG, context_management=CONTEXT)
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=LONG,
        context_management=CONTEXT,
    )
    third = client.responses.create(
        model=MODEL,
        previous_response_id=second.id,
        input="And the tiles?",
        context_management=CONTEXT,
    )

    assert [item.type for item in first.output] == ["message"]
    assert [item.type for item in second.output] == ["compaction", "message"]
    compaction = second.output[0]
    assert isinstance(compaction, ResponseCompactionItem)
    assert compaction.id.startswith("cmp_") and compaction.encrypted_content
    assert second.output_text.startswith("Offline stand-in: I heard “Please keep in mind")

    tokens = [input_tokens(r.usage) for r in (first, second, third)]
    assert tokens[0] < THRESHOLD <= tokens[1]
    assert tokens[2] < tokens[1] and tokens[2] < THRESHOLD
    assert third.output_text == "Offline stand-in: I heard “And the tiles?”."
    assert [r["compacted"] for r in standin.response_requests()] == [False, True, False]

    items = list(client.responses.input_items.list(third.id, order="asc"))
    assert [i.type for i in items] == ["compaction", "message", "message"]


async def test_compaction_streams_its_item_first(aclient: AsyncOpenAI) -> None:
    first = await aclient.responses.create(model=MODEL, input=LONG * 2, store=True)
    async with aclient.responses.stream(
        model=MODEL,
        previous_response_id=first.id,
        input="go on",
        context_management=CONTEXT,
    ) as stream:
        events = [event async for event in stream]
        final = await stream.get_final_response()

    added = [e for e in events if e.type == "response.output_item.added"]
    done = [e for e in events if e.type == "response.output_item.done"]
    assert [(e.output_index, e.item.type) for e in added] == [(0, "compaction"), (1, "message")]
    assert getattr(added[0].item, "encrypted_content", None) is None  # only the done event carries it
    compaction = done[0].item
    assert compaction.type == "compaction" and compaction.encrypted_content
    assert [item.type for item in final.output] == ["compaction", "message"]
    assert final.output_text == "Offline stand-in: I heard “go on”."


def test_stateless_chaining_with_a_compaction_item(client: OpenAI) -> None:
    history: list[Any] = [{"role": "user", "content": LONG}, {"role": "assistant", "content": LONG}]
    compacted = client.responses.create(
        model=MODEL,
        input=[*history, {"role": "user", "content": "ok"}],
        store=False,
        context_management=CONTEXT,
    )
    assert compacted.output[0].type == "compaction"
    full_tokens = input_tokens(compacted.usage)

    # Items before the compaction item are superseded, so keeping them costs nothing.
    kept = [*history, *[i.model_dump(exclude_none=True) for i in compacted.output], {"role": "user", "content": "next"}]
    follow_up = client.responses.create(model=MODEL, input=kept, store=False)
    assert follow_up.output_text == "Offline stand-in: I heard “next”."
    assert input_tokens(follow_up.usage) < full_tokens / 2


def test_standalone_compact_endpoint(client: OpenAI, standin: StandinProcess) -> None:
    history: list[Any] = [
        {"role": "user", "content": "Plan my week."},
        {"role": "assistant", "content": LONG},
        {"role": "user", "content": "Move gym to Thursday."},
        {"role": "assistant", "content": LONG},
    ]
    compacted = client.responses.compact(model=MODEL, input=history)

    assert compacted.object == "response.compaction"
    assert compacted.id.startswith("resp_")
    assert [item.type for item in compacted.output] == ["message", "message", "compaction"]
    # The SDK types these user messages as assistant messages (openai-wire.md 6.4), so
    # pydantic warns while dumping them; the data is intact.
    users: list[dict[str, Any]] = [item.to_dict(warnings=False) for item in compacted.output[:2]]
    assert [u["role"] for u in users] == ["user", "user"]
    assert [u["content"][0]["text"] for u in users] == ["Plan my week.", "Move gym to Thursday."]
    assert compacted.usage.input_tokens > 0 and compacted.usage.output_tokens > 0

    next_input: list[Any] = [item.to_dict(warnings=False) for item in compacted.output] + [
        {"role": "user", "content": "And Friday?"}
    ]
    after = client.responses.create(model=MODEL, input=next_input)
    assert after.output_text == "Offline stand-in: I heard “And Friday?”."
    assert input_tokens(after.usage) < compacted.usage.input_tokens
    [recorded] = standin.requests("/v1/responses/compact")
    assert recorded["compacted"] is True and recorded["effective_input_tokens"] == compacted.usage.input_tokens


def test_compact_a_stored_chain_by_id(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input="first thing")
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="second thing")
    compacted = client.responses.compact(model=MODEL, previous_response_id=second.id)
    messages: list[dict[str, Any]] = [
        item.to_dict(warnings=False) for item in compacted.output if item.type == "message"
    ]
    texts = [message["content"][0]["text"] for message in messages]
    assert texts == ["first thing", "second thing"]
    assert compacted.output[-1].type == "compaction"


def test_compaction_trigger_returns_only_the_compaction_item(client: OpenAI) -> None:
    first = client.responses.create(model=MODEL, input=LONG)
    compacted = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "compaction_trigger"}],
    )
    assert [item.type for item in compacted.output] == ["compaction"]
    after = client.responses.create(model=MODEL, previous_response_id=compacted.id, input="still there?")
    assert input_tokens(after.usage) < input_tokens(first.usage)
    assert after.output_text == "Offline stand-in: I heard “still there?”."


def test_foreign_encrypted_content_is_rejected(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(
            model=MODEL,
            input=[{"type": "compaction", "encrypted_content": "gAAAAAnot-ours"}, {"role": "user", "content": "hi"}],
        )
    assert caught.value.code == "invalid_encrypted_content"


def test_scripted_compact_steps_only_hit_the_compact_endpoint(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "error", "status": 500, "match": {"endpoint": "compact"}})
    normal = client.responses.create(model=MODEL, input="not a compaction")
    assert normal.output_text == "Offline stand-in: I heard “not a compaction”."
    with pytest.raises(openai.InternalServerError):
        client.responses.compact(model=MODEL, input="compact me")
    assert client.responses.compact(model=MODEL, input="compact me").output[-1].type == "compaction"
