"""The price table: shipped with its date and source, overridden per model by runtime-data's
prices.json, and a model it lacks is unpriced (None), never $0."""

import json
from pathlib import Path

import pytest

from delegate.runtime.metering import searches_in, usage_of
from delegate.runtime.pricing import Usage, load_prices


def test_the_shipped_table_prices_each_token_class() -> None:
    table = load_prices(None)
    assert table.date == "2026-11-05" and "OpenAI" in table.source
    # gpt-5.5: $5 input, $0.50 cached, $30 output per 1M tokens.
    assert table.cost("gpt-5.5", Usage(input_tokens=1_000_000, cached_tokens=200_000, output_tokens=10_000)) == (
        pytest.approx(0.8 * 5 + 0.2 * 0.5 + 0.01 * 30))
    assert table.cost("gpt-5.5-2026-04-23", Usage(input_tokens=1000)) == table.cost("gpt-5.5", Usage(input_tokens=1000))
    # Realtime audio: $32 in, $64 out per 1M; text output $16.
    realtime = Usage(input_tokens=1000, audio_input_tokens=800, output_tokens=500, audio_output_tokens=400)
    assert table.cost("gpt-realtime", realtime) == pytest.approx((200 * 4 + 800 * 32 + 100 * 16 + 400 * 64) / 1e6)
    # A web search adds its per-call fee.
    assert table.cost("gpt-5.5", Usage(web_search_calls=2)) == pytest.approx(0.02)


def test_an_unknown_model_is_unpriced_never_free() -> None:
    table = load_prices(None)
    assert table.cost("somebody-elses-model", Usage(input_tokens=10)) is None
    assert table.cost("gpt-5.5", Usage(input_tokens=10, audio_input_tokens=10)) is None  # no audio price


def test_runtime_data_prices_override_per_model(tmp_path: Path) -> None:
    (tmp_path / "prices.json").write_text(json.dumps({
        "date": "2027-01-01",
        "models": {"gpt-5.5": {"input": 1.0, "output": 2.0}, "local-llm": {"input": 0, "output": 0}},
    }))
    table = load_prices(tmp_path)
    assert table.date == "2027-01-01"
    assert table.cost("gpt-5.5", Usage(input_tokens=1_000_000)) == pytest.approx(1.0)
    assert table.cost("local-llm", Usage(input_tokens=5)) == 0.0  # priced at zero by the owner: free, not unpriced
    assert table.cost("gpt-5.4", Usage(input_tokens=1_000_000)) == pytest.approx(2.5)  # the rest stays shipped


def test_usage_is_read_from_responses_and_realtime_shapes() -> None:
    responses = {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 64}, "output_tokens": 9}
    assert usage_of(responses, web_search_calls=1) == Usage(120, 64, 9, 0, 0, 1)
    realtime = {"input_tokens": 300, "output_tokens": 50,
                "input_token_details": {"cached_tokens": 0, "audio_tokens": 250},
                "output_token_details": {"text_tokens": 10, "audio_tokens": 40}}
    assert usage_of(realtime) == Usage(300, 0, 50, 250, 40, 0)
    assert searches_in({"output": [{"type": "web_search_call"}, {"type": "message"}]}) == 1
    assert searches_in({"tool_usage": {"web_search": {"num_requests": 3}}, "output": []}) == 3
