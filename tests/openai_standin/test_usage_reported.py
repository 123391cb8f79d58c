"""Usage on every billed answer, as the API reports it (issue #29 item 5): a response that failed
after the model ran carries its usage (it is billed; the terminal ``response.failed`` event says
so), a web search counts its calls, and the compaction endpoint reports what it read. Realtime's
``response.done`` usage is checked in test_realtime_turns.py."""

from openai import OpenAI

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"


def test_a_response_that_failed_after_generating_carries_its_usage(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "stream_error", "after_deltas": 2, "shape": "failed", "text": "one two three four"})
    with client.responses.create(model=MODEL, input="Count to four.", stream=True) as stream:
        events = list(stream)
    failed = events[-1]
    assert failed.type == "response.failed"
    usage = failed.response.usage
    assert usage is not None and usage.input_tokens > 0 and usage.output_tokens > 0
    assert usage.total_tokens == usage.input_tokens + usage.output_tokens


def test_a_web_search_counts_its_calls(client: OpenAI, standin: StandinProcess) -> None:
    standin.script({"action": "web_search", "text": "It opens at ten.",
                    "results": [{"url": "https://museum.example.org/hours"}]})
    response = client.responses.create(model=MODEL, input="museum hours", tools=[{"type": "web_search"}])
    assert response.usage is not None and response.usage.input_tokens > 0
    assert [item.type for item in response.output].count("web_search_call") == 1
    assert response.tool_usage is not None and response.tool_usage.web_search.num_requests == 1


def test_compaction_reports_what_it_read(client: OpenAI, standin: StandinProcess) -> None:
    compacted = client.responses.compact(model=MODEL, input="compact me, please")
    assert compacted.usage is not None and compacted.usage.input_tokens > 0
