"""The built-in web search tool, read through the real SDK's typed objects: the
`web_search_call` item, `url_citation` annotations that point into the text, the
streaming event sequence, scripted results, `include` sources and domain filters."""

import json
from typing import Any, cast
from urllib.parse import urlsplit

from openai import OpenAI
from openai.types.responses import (
    FunctionToolParam,
    Response,
    ResponseCompletedEvent,
    ResponseContentPartDoneEvent,
    ResponseFunctionWebSearch,
    ResponseIncludable,
    ResponseOutputItemAddedEvent,
    ResponseOutputItemDoneEvent,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseOutputTextAnnotationAddedEvent,
    ResponseTextDoneEvent,
    ResponseWebSearchCallSearchingEvent,
    ToolChoiceAllowedParam,
    ToolChoiceFunctionParam,
    ToolChoiceTypesParam,
    ToolParam,
    WebSearchToolParam,
)
from openai.types.responses.response_output_text import AnnotationURLCitation

from tests.support.standin import StandinProcess

MODEL = "gpt-5.5"
QUESTION = "When does the city museum open on Sunday?"
SEARCH: list[ToolParam] = [{"type": "web_search"}]
SOURCES: list[ResponseIncludable] = ["web_search_call.action.sources"]
WEATHER_TOOL: FunctionToolParam = {
    "type": "function",
    "name": "get_weather",
    "strict": True,
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def _split(response: Response) -> tuple[ResponseFunctionWebSearch, ResponseOutputText]:
    """The [web_search_call, message] pair of a searching response."""
    call, message = response.output
    assert isinstance(call, ResponseFunctionWebSearch) and isinstance(message, ResponseOutputMessage)
    [part] = message.content
    assert isinstance(part, ResponseOutputText)
    return call, part


def _citations(part: ResponseOutputText) -> list[AnnotationURLCitation]:
    cited = [a for a in part.annotations if isinstance(a, AnnotationURLCitation)]
    assert len(cited) == len(part.annotations)
    return cited


def _assert_points_into_text(part: ResponseOutputText) -> None:
    for citation in _citations(part):
        span = part.text[citation.start_index : citation.end_index]
        assert citation.url in span and span.startswith("(") and span.endswith("))")


def test_default_search_then_cited_answer(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH)
    call, part = _split(response)

    assert call.type == "web_search_call" and call.id.startswith("ws_") and call.status == "completed"
    assert call.action.type == "search" and call.action.query == QUESTION
    assert call.action.sources is None  # only with include
    assert response.output_text == part.text
    assert part.text.startswith(f"Offline stand-in: I searched the web for “{QUESTION}”.")

    citations = _citations(part)
    assert [urlsplit(c.url).hostname for c in citations] == ["example.org", "news.example.com", "docs.example.net"]
    assert all(c.url.endswith("/when-does-the-city-museum-open") for c in citations)
    assert citations[0].title == f"Example.org: {QUESTION}"
    _assert_points_into_text(part)
    assert part.text[citations[0].start_index : citations[0].end_index] == f"([example.org]({citations[0].url}))"

    assert response.tool_usage is not None and response.tool_usage.web_search.num_requests == 1
    [echoed] = response.tools
    assert echoed.type == "web_search" and echoed.search_context_size == "medium"
    assert echoed.user_location is not None and echoed.user_location.country == "US"

    plain = client.responses.create(model=MODEL, input=QUESTION)
    assert response.usage is not None and plain.usage is not None
    assert response.usage.input_tokens > plain.usage.input_tokens  # the search's reading is input


def test_include_sources_lists_every_result(client: OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Oslo ferry timetable", tools=SEARCH, include=SOURCES)
    call, part = _split(response)
    assert call.action.type == "search" and call.action.sources is not None
    assert [s.type for s in call.action.sources] == ["url"] * 3
    assert [s.url for s in call.action.sources] == [c.url for c in _citations(part)]


def test_streaming_sequence_and_annotation_events(client: OpenAI) -> None:
    events = list(client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH, include=SOURCES, stream=True))
    types = [e.type for e in events]
    assert [e.sequence_number for e in events] == list(range(len(events)))

    assert types[:7] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
        "response.output_item.done",
    ]
    assert types[7:9] == ["response.output_item.added", "response.content_part.added"]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    middle = set(types[9:-4])
    assert middle == {"response.output_text.delta", "response.output_text.annotation.added"}

    item_added, item_done = events[2], events[6]
    assert isinstance(item_added, ResponseOutputItemAddedEvent) and isinstance(item_done, ResponseOutputItemDoneEvent)
    started, finished = item_added.item, item_done.item
    assert isinstance(started, ResponseFunctionWebSearch) and isinstance(finished, ResponseFunctionWebSearch)
    assert started.id == finished.id and started.status == "in_progress" and finished.status == "completed"
    assert started.action.type == "search" and started.action.sources is None  # sources arrive with done
    assert finished.action.type == "search" and finished.action.sources
    searching = events[4]
    assert isinstance(searching, ResponseWebSearchCallSearchingEvent)
    assert (searching.item_id, searching.output_index) == (finished.id, 0)

    # Each citation is announced once the text it spans has streamed, in order.
    message_added = events[7]
    assert isinstance(message_added, ResponseOutputItemAddedEvent)
    message_id = message_added.item.id
    written, announced = "", []
    for event in events[9:-4]:
        if event.type == "response.output_text.delta":
            written += event.delta
            continue
        assert isinstance(event, ResponseOutputTextAnnotationAddedEvent)
        assert (event.item_id, event.output_index, event.content_index) == (message_id, 1, 0)
        assert event.annotation is not None and event.annotation.type == "url_citation"
        assert event.annotation.end_index <= len(written)
        assert written[event.annotation.start_index : event.annotation.end_index].endswith(
            f"({event.annotation.url}))"
        )
        announced.append(event)
    assert [e.annotation_index for e in announced] == [0, 1, 2]

    completed, text_done, part_done = events[-1], events[-4], events[-3]
    assert isinstance(completed, ResponseCompletedEvent) and isinstance(text_done, ResponseTextDoneEvent)
    assert isinstance(part_done, ResponseContentPartDoneEvent) and part_done.part.type == "output_text"
    final = completed.response
    _, part = _split(final)
    assert part.text == written and text_done.text == written
    assert [a.to_dict() for a in part.annotations] == [e.annotation.to_dict() for e in announced if e.annotation]
    assert part_done.part.annotations == part.annotations  # content_part.done carries them
    assert final.tool_usage is not None and final.tool_usage.web_search.num_requests == 1


def test_stream_helper_accumulates_a_search(client: OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="tram strike Lisbon", tools=SEARCH) as stream:
        for _event in stream:
            pass
        final = stream.get_final_response()
    call, part = _split(final)
    assert call.action.type == "search" and call.action.query == "tram strike Lisbon"
    _assert_points_into_text(part)


def test_scripted_results_and_text(client: OpenAI, standin: StandinProcess) -> None:
    hours = "https://museum.example/hours"
    standin.script(
        {
            "action": "web_search",
            "match": {"has_tool": "web_search"},
            "query": "city museum sunday opening hours",
            "results": [
                {"url": hours, "title": "City Museum: Opening hours", "snippet": "Sundays 10:00-18:00"},
                {"url": "https://visit.example/museums"},
            ],
            "text": f"The museum opens at 10:00 on Sundays ([museum.example]({hours})).",
        }
    )
    unmatched = client.responses.create(model=MODEL, input=QUESTION)  # no search tool: the step waits
    assert unmatched.output_text == f"Offline stand-in: I heard “{QUESTION}”."

    response = client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH, include=SOURCES)
    call, part = _split(response)
    assert call.action.type == "search" and call.action.query == "city museum sunday opening hours"
    assert [s.url for s in call.action.sources or []] == [hours, "https://visit.example/museums"]

    inline, appended = _citations(part)
    assert part.text == (
        f"The museum opens at 10:00 on Sundays ([museum.example]({hours})). "
        "([visit.example](https://visit.example/museums))"
    )
    assert part.text[inline.start_index : inline.end_index] == f"([museum.example]({hours}))"
    assert (inline.url, inline.title) == (hours, "City Museum: Opening hours")
    assert part.text[appended.start_index : appended.end_index] == "([visit.example](https://visit.example/museums))"
    assert appended.title == "visit.example"  # no title scripted: the host
    assert standin.response_requests()[-1]["step"]["action"] == "web_search"


def test_scripted_text_kept_verbatim_without_appending(client: OpenAI, standin: StandinProcess) -> None:
    standin.script(
        [
            {
                "action": "web_search",
                "results": [{"url": "https://a.example/x", "title": "A"}, {"url": "https://b.example/y"}],
                "text": "See https://a.example/x for details.",
                "append_citations": False,
            },
            {"action": "web_search", "results": [], "text": "Nothing turned up."},
        ]
    )
    _, part = _split(client.responses.create(model=MODEL, input="details?", tools=SEARCH))
    [citation] = _citations(part)
    assert part.text == "See https://a.example/x for details."
    assert part.text[citation.start_index : citation.end_index] == "https://a.example/x"

    call, part = _split(client.responses.create(model=MODEL, input="anything?", tools=SEARCH, include=SOURCES))
    assert call.action.type == "search" and call.action.sources == [] and call.action.query == "anything?"
    assert part.text == "Nothing turned up." and part.annotations == []


def test_allowed_domains_filter_invented_results(client: OpenAI) -> None:
    tools: list[Any] = [{"type": "web_search", "filters": {"allowed_domains": ["example.org", "city.gov"]}}]
    call, part = _split(client.responses.create(model=MODEL, input="bin collection day", tools=tools, include=SOURCES))
    hosts = [urlsplit(c.url).hostname for c in _citations(part)]
    assert hosts == ["example.org", "city.gov"]
    assert call.action.type == "search" and [urlsplit(s.url).hostname for s in call.action.sources or []] == hosts

    # Subdomains of an allowed domain pass too.
    tools = [{"type": "web_search", "filters": {"allowed_domains": ["https://Example.com/"]}}]
    _, part = _split(client.responses.create(model=MODEL, input="bin collection day", tools=tools))
    assert [urlsplit(c.url).hostname for c in _citations(part)] == ["news.example.com", "example.com"]


def test_tool_settings_are_accepted_and_shape_the_search(client: OpenAI) -> None:
    def search(tool: WebSearchToolParam) -> Response:
        return client.responses.create(model=MODEL, input="farmers market", tools=[tool])

    low = search({"type": "web_search", "search_context_size": "low"})
    high = search({"type": "web_search", "search_context_size": "high"})
    assert low.usage is not None and high.usage is not None
    assert high.usage.input_tokens > low.usage.input_tokens

    located = search(
        {"type": "web_search", "user_location": {"type": "approximate", "city": "Berlin", "country": "DE"}}
    )
    assert "near Berlin, DE" in located.output_text
    [echoed] = located.tools
    assert echoed.type == "web_search" and echoed.user_location is not None
    assert (echoed.user_location.city, echoed.user_location.country) == ("Berlin", "DE")

    dated: ToolParam = {"type": "web_search_2025_08_26"}
    preview: ToolParam = {"type": "web_search_preview"}
    for kind in (dated, preview):
        call, _ = _split(client.responses.create(model=MODEL, input="farmers market", tools=[kind]))
        assert call.type == "web_search_call"


def test_forced_and_structured_searches(client: OpenAI) -> None:
    # Any: the SDK's FunctionToolParam requires "strict", which the API does not; this tool leaves it out.
    function: dict[str, Any] = {"type": "function", "name": "noop", "parameters": {"type": "object", "properties": {}}}
    preview: ToolChoiceTypesParam = {"type": "web_search_preview"}
    forced = client.responses.create(
        model=MODEL,
        input="ferry times",
        tools=[{"type": "web_search_preview"}, cast(FunctionToolParam, function)],
        tool_choice=preview,
    )
    assert [item.type for item in forced.output] == ["web_search_call", "message"]

    structured = client.responses.create(
        model=MODEL, input="ferry times", tools=SEARCH, text={"format": {"type": "json_object"}}
    )
    _, part = _split(structured)
    answer = json.loads(part.text)["answer"]
    assert answer.startswith("Offline stand-in: I searched the web for “ferry times”.")
    assert "](" not in answer and part.annotations == []  # no inline links inside JSON


def test_when_the_model_does_not_search(client: OpenAI) -> None:
    none = client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH, tool_choice="none")
    assert [item.type for item in none.output] == ["message"]
    assert none.tool_usage is not None and none.tool_usage.web_search.num_requests == 0

    capped = client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH, max_tool_calls=0)
    assert [item.type for item in capped.output] == ["message"]

    only_functions: ToolChoiceAllowedParam = {
        "type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "get_weather"}]
    }
    restricted = client.responses.create(
        model=MODEL, input=QUESTION, tools=[*SEARCH, WEATHER_TOOL], tool_choice=only_functions
    )
    assert [item.type for item in restricted.output] == ["message"]

    # A function result in hand: answer from it rather than search again.
    forced: ToolChoiceFunctionParam = {"type": "function", "name": "get_weather"}
    both = [*SEARCH, WEATHER_TOOL]
    named = client.responses.create(model=MODEL, input="weather Oslo", tools=both, tool_choice=forced)
    [call] = named.output
    assert call.type == "function_call"
    after = client.responses.create(
        model=MODEL,
        previous_response_id=named.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
        tools=[*SEARCH, WEATHER_TOOL],
    )
    assert after.output_text == "Offline stand-in: get_weather returned “sunny”."


def test_search_joins_the_chain(client: OpenAI, standin: StandinProcess) -> None:
    first = client.responses.create(model=MODEL, input=QUESTION, tools=SEARCH)
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="Thanks!")
    assert second.output_text == "Offline stand-in: I heard “Thanks!”."
    assert [r["effective_input_tokens"] for r in standin.response_requests()] == [
        r.usage.input_tokens for r in (first, second) if r.usage
    ]

    items = list(client.responses.input_items.list(second.id, order="asc"))
    assert [i.type for i in items] == ["message", "web_search_call", "message", "message"]
    assert standin.stored(second.id)["chain_items"][1]["type"] == "web_search_call"
