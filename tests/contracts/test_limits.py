"""The bounds on outside JSON (``contracts.limits``) and the one definition of empty text."""

import json
from typing import Any

import pytest
from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.limits import MAX_JSON_DEPTH, JsonRefused, JsonTooDeep, loads_bounded, raw_decode_bounded
from delegate.contracts.signals import SIGNAL_ADAPTER
from delegate.contracts.tasks import TaskCreate
from delegate.contracts.text import is_blank


def nested(depth: int) -> Any:
    """A document ``depth`` containers deep: ``{"a": {"a": … 1}}``."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_the_limit_is_far_below_what_every_decoder_takes() -> None:
    # pydantic's JSON parser (the inner plane, the ledger) stops near 200 levels; the history
    # page carries a signal's payload about 7 levels below its body.
    assert MAX_JSON_DEPTH + 7 < 200


@pytest.mark.parametrize("depth", [1, 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_documents_within_the_limit_are_read(depth: int) -> None:
    assert loads_bounded(json.dumps(nested(depth))) == nested(depth)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 197, 253, 5000])
def test_deeper_documents_are_refused_naming_the_limit(depth: int) -> None:
    text = json.dumps(nested(depth)) if depth < 900 else "[" * depth + "]" * depth
    with pytest.raises(JsonTooDeep) as caught:
        loads_bounded(text)
    assert str(MAX_JSON_DEPTH) in str(caught.value)


@pytest.mark.parametrize("text", ['{"a": NaN}', '[Infinity]', '{"a": -Infinity}', '{"a": 1e400}', '[[-1e999]]'])
def test_nan_and_infinity_are_refused(text: str) -> None:
    with pytest.raises(JsonRefused):
        loads_bounded(text)


def test_malformed_json_is_still_a_value_error_not_a_refusal() -> None:
    with pytest.raises(ValueError) as caught:
        loads_bounded("{not json")
    assert not isinstance(caught.value, JsonRefused)


def test_raw_decoding_counts_depth_from_where_the_value_sits() -> None:
    text = json.dumps([nested(MAX_JSON_DEPTH - 1)])
    assert raw_decode_bounded(text, 1, depth=2)[0] == nested(MAX_JSON_DEPTH - 1)
    with pytest.raises(JsonTooDeep):
        raw_decode_bounded(json.dumps([nested(MAX_JSON_DEPTH)]), 1, depth=2)


def script(data: Any) -> dict[str, Any]:
    return {"kind": "script", "source": "api", "payload": {"text": "t", "data": data}}


@pytest.mark.parametrize("depth", [197, 252])
def test_the_inner_plane_decoder_refuses_what_it_could_not_carry(depth: int) -> None:
    """These depths were accepted, published, then dead-lettered: every decoder refuses them now."""
    with pytest.raises(ValidationError) as caught:
        SIGNAL_ADAPTER.validate_python(script(nested(depth)))
    assert "nested more than" in str(caught.value)
    raw = b'{"kind":"script","source":"api","payload":{"text":"t","data":' + json.dumps(nested(100)).encode() + b"}}"
    with pytest.raises(ValidationError):
        topics.INNER_SIGNAL.decode(raw)


def test_a_signal_within_the_limit_round_trips_through_its_topic() -> None:
    signal = SIGNAL_ADAPTER.validate_python(script(nested(MAX_JSON_DEPTH - 3)))
    assert topics.INNER_SIGNAL.decode(topics.INNER_SIGNAL.encode(signal)) == signal


def test_non_finite_numbers_in_a_signal_are_refused_by_the_model_too() -> None:
    with pytest.raises(ValidationError):
        SIGNAL_ADAPTER.validate_python(script({"x": float("nan")}))


@pytest.mark.parametrize("text", ["", "   ", "\u200b\u200b", "\ufeff\u200d", "\u3164", "\u2800 \u200b"])
def test_empty_text_is_one_definition_for_chat_and_task_goals(text: str) -> None:
    assert is_blank(text)
    with pytest.raises(ValidationError) as caught:
        TaskCreate(goal=text)
    assert caught.value.errors()[0]["type"] in ("empty_text", "string_too_short")


def test_a_goal_with_a_visible_character_among_invisible_ones_is_taken() -> None:
    assert TaskCreate(goal="\u200bbuy milk\u200b").goal == "\u200bbuy milk\u200b"
