"""One `POST /v1/responses` run: validate, resolve the chain, compact when the
threshold is crossed, let the fake model plan the output, and store the result.

The HTTP layer (routes, streaming, scripted faults) lives elsewhere; this module
knows nothing about transport."""

import logging
import time
from dataclasses import dataclass, field
from typing import Any

from delegate.openai_standin import chain, compaction, function_tools, websearch
from delegate.openai_standin.errors import invalid_request, missing_parameter
from delegate.openai_standin.generator import ModelInput, Planned, PlannedCall, PlannedSearch, PlannedText, plan
from delegate.openai_standin.ids import new_id
from delegate.openai_standin.items import Item, item_text, normalize_input
from delegate.openai_standin.script import AnyStep, RequestFacts, Script
from delegate.openai_standin.settings import Settings
from delegate.openai_standin.shapes import (
    function_call_item,
    message_item,
    response_object,
    tool_usage,
    usage,
    web_search_call_item,
)
from delegate.openai_standin.store import ResponseStore, StoredResponse
from delegate.openai_standin.tokens import cached_prefix, estimate_items, estimate_prompt, estimate_text

log = logging.getLogger(__name__)

# Terminal statuses whose response carries usage: the model ran, so the call is billed.
BILLED = frozenset({"completed", "incomplete", "failed"})


@dataclass(frozen=True)
class CreateRequest:
    body: dict[str, Any]
    items: list[Item]  # this request's own input, normalised
    stream: bool
    tools: list[dict[str, Any]]
    demo: bool = False  # answer as the offline demo (`Settings.demo_for`)


@dataclass
class ResponseRun:
    """One created response, from its request to its output and usage. Not a turn: one agent
    turn may create several (each tool round is a response)."""

    body: dict[str, Any]
    previous_response_id: str | None
    input_items: list[Item]
    context: list[Item]
    output: list[Item]
    input_tokens: int
    cached_tokens: int
    output_tokens: int
    compacted: bool
    stored: bool
    web_search_offered: bool = False
    response_id: str = field(default_factory=lambda: new_id("resp"))
    created_at: int = field(default_factory=lambda: int(time.time()))

    def response(self, status: str, error: dict[str, Any] | None = None) -> dict[str, Any]:
        done = status == "completed"
        return response_object(
            response_id=self.response_id,
            created_at=self.created_at,
            body=self.body,
            status=status,
            output=self.output if done else [],
            # A response that ended after the model ran (incomplete, or failed after generating) is
            # billed and carries its usage, as the API's terminal events do; one still in progress
            # has none yet.
            usage_=usage(self.input_tokens, self.cached_tokens, self.output_tokens) if status in BILLED else None,
            error=error,
            previous_response_id=self.previous_response_id,
            tool_usage_=tool_usage(self.web_searches()) if done and self.web_search_offered else None,
        )

    def web_searches(self) -> int:
        return sum(item.get("type") == "web_search_call" for item in self.output)


def parse_create(body: dict[str, Any], *, demo: bool = False) -> CreateRequest:
    """A body OpenAI's schema took (`strict.check_body`), with the rules the schema cannot say."""
    if not body.get("model"):  # optional in the spec's schema, required by the API
        raise missing_parameter("model")
    tools = body.get("tools") or []
    function_tools.check(tools)
    if body.get("previous_response_id") is not None and body.get("conversation") is not None:
        raise invalid_request(
            "Mutually exclusive parameters: Ensure you are only providing one of: "
            "'previous_response_id' or 'conversation'.",
            param="previous_response_id",
            code="mutually_exclusive_parameters",
        )
    return CreateRequest(
        body=body, items=normalize_input(body.get("input")), stream=bool(body.get("stream")), tools=tools, demo=demo
    )


class Engine:
    def __init__(self, settings: Settings, store: ResponseStore, script: Script) -> None:
        self.settings = settings
        self.store = store
        self.script = script

    def take_step(self, endpoint: str, body: dict[str, Any], items: list[Item], stream: bool) -> AnyStep | None:
        facts = RequestFacts(
            endpoint="compact" if endpoint == "compact" else "responses",
            input_text="\n".join(item_text(item) for item in items),
            instructions=str(body.get("instructions") or ""),
            has_tool_output=any(item.get("type") == "function_call_output" for item in items),
            model=str(body.get("model") or ""),
            stream=stream,
            tools=_offered_tools(body.get("tools")),
            item_types=frozenset(str(item.get("type")) for item in items),
        )
        return self.script.take(facts)

    def create(self, request: CreateRequest, step: AnyStep | None) -> ResponseRun:
        body = request.body
        new_items, triggered = chain.split_trigger(request.items)
        effective, previous = chain.resolve(self.store, body.get("previous_response_id"), new_items)
        chain.check_tool_pairs(effective)
        threshold = compaction.compact_threshold(body.get("context_management"))
        instructions = body.get("instructions")
        input_tokens = estimate_prompt(instructions, request.tools, effective)

        output: list[Item] = []
        context = effective
        crossed = threshold is not None and input_tokens >= threshold and _compactable(effective)
        if triggered or crossed:
            output.append(compaction.make_item(effective, compaction.KIND_AUTO))
            context = []  # the compaction item (first in output) now stands for all of it
        else:
            effective = self._fit_window(body, request.tools, effective)
            input_tokens = estimate_prompt(instructions, request.tools, effective)
            context = effective
        if not triggered:
            model_request = ModelInput(
                effective,
                request.tools,
                body.get("tool_choice", "auto"),
                _text_format(body),
                body.get("max_tool_calls"),
                instructions=instructions if isinstance(instructions, str) else "",
                demo=request.demo,
            )
            with_sources = websearch.SOURCES_INCLUDE in (body.get("include") or [])
            output.extend(_materialize(plan(model_request, step), with_sources))
        searches = sum(item.get("type") == "web_search_call" for item in output)
        # What the searches read comes on top of the prompt, like on the real API.
        input_tokens += websearch.context_tokens(websearch.find_tool(request.tools), searches)

        cached = 0
        if previous is not None and not previous.compacted and not output_has_compaction(output):
            cached = min(
                cached_prefix(int((previous.response.get("usage") or {}).get("input_tokens", 0))), input_tokens
            )
        run = ResponseRun(
            body=body,
            previous_response_id=previous.response["id"] if previous else None,
            input_items=effective,
            context=context,
            output=output,
            input_tokens=input_tokens,
            cached_tokens=cached,
            output_tokens=_output_tokens(output),
            compacted=output_has_compaction(output),
            stored=body.get("store") is not False,
            web_search_offered=any(websearch.is_search_tool(tool) for tool in request.tools) or searches > 0,
        )
        if run.stored:
            status = "in_progress" if request.stream else "completed"
            self.store.put(StoredResponse(run.response(status), effective, context, output, compacted=run.compacted))
        return run

    def finish(self, run: ResponseRun, status: str, error: dict[str, Any] | None = None) -> None:
        """Record how a streamed run ended."""
        stored = self.store.get(run.response_id) if run.stored else None
        if stored is not None:
            stored.response = run.response(status, error)
            if status != "completed":
                stored.output = []

    def _fit_window(self, body: dict[str, Any], tools: list[Any], items: list[Item]) -> list[Item]:
        window = self.settings.standin_context_window
        instructions = body.get("instructions")
        if estimate_prompt(instructions, tools, items) <= window:
            return items
        if body.get("truncation") != "auto":
            raise invalid_request(
                "Your input exceeds the context window of this model. Please adjust your input and try again.",
                param="input",
                code="context_length_exceeded",
            )
        kept = list(items)
        while len(kept) > 1 and estimate_prompt(instructions, tools, kept) > window:
            kept.pop(0)  # `truncation: "auto"` drops the oldest items first
        log.info("truncated %d oldest items to fit the context window", len(items) - len(kept))
        return kept


def output_has_compaction(output: list[Item]) -> bool:
    return any(item.get("type") == "compaction" for item in output)


def _compactable(items: list[Item]) -> bool:
    # A lone compaction item cannot be compacted further.
    return not (len(items) <= 1 and all(item.get("type") == "compaction" for item in items))


def _text_format(body: dict[str, Any]) -> dict[str, Any] | None:
    text = body.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        return dict(text["format"])
    return None


def _materialize(planned: list[Planned], with_sources: bool) -> list[Item]:
    items: list[Item] = []
    for entry in planned:
        if isinstance(entry, PlannedText):
            items.append(message_item(new_id("msg"), entry.text, annotations=list(entry.annotations)))
        elif isinstance(entry, PlannedSearch):
            items.append(web_search_call_item(new_id("ws"), entry, with_sources))
        elif isinstance(entry, PlannedCall):
            items.append(function_call_item(new_id("fc"), entry))
    return items


def _offered_tools(tools: object) -> frozenset[str]:
    """What a script step's `has_tool` can name: tool types, function names, and
    "web_search" for any web search type."""
    offered: set[str] = set()
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        offered.add(str(tool.get("type")))
        if tool.get("type") == "function" and tool.get("name"):
            offered.add(str(tool["name"]))
        if websearch.is_search_tool(tool):
            offered.add("web_search")
    return frozenset(offered)


def _output_tokens(output: list[Item]) -> int:
    compacted = [item for item in output if item.get("type") == "compaction"]
    rest = [item for item in output if item.get("type") != "compaction"]
    # The compaction pass "writes" its summary; messages and calls count their text.
    return estimate_items(compacted) + sum(estimate_text(item_text(item)) for item in rest)
