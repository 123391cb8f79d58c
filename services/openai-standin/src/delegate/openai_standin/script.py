"""The scripting engine: a FIFO of steps that tests push over `/_standin/script`.

Each request to `/v1/responses` or `/v1/responses/compact` takes the first queued
step whose `match` fits it; with no fitting step the default behaviour applies.
A step with `times: n` stays queued until it has been used n times.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Generic, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, model_validator


class _Strict(BaseModel):
    # Typos in a test's script should fail loudly, not silently match everything.
    model_config = ConfigDict(extra="forbid")


class Match(_Strict):
    endpoint: Literal["responses", "compact", "any"] = "responses"
    input_contains: str | None = None  # case-insensitive, over this request's own input
    instructions_contains: str | None = None  # case-insensitive
    has_tool_output: bool | None = None  # request input carries function_call_output items
    model: str | None = None
    stream: bool | None = None
    # The request offers this tool: a function name, a tool type, or "web_search" for any
    # web search type (so a scripted search only answers requests that could search).
    has_tool: str | None = None
    # The request's own input carries an item of this type: "compaction" picks a turn that
    # replays the compact endpoint's output.
    has_item_type: str | None = None


class _Step(_Strict):
    match: Match = Field(default_factory=Match)
    times: int = Field(default=1, ge=1)


class TextStep(_Step):
    action: Literal["text"]
    text: str


class ToolCall(_Strict):
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    call_id: str | None = None

    def arguments_json(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, ensure_ascii=False, separators=(",", ":"))


class ToolCallStep(_Step):
    action: Literal["tool_call"]
    name: str | None = None
    arguments: dict[str, Any] | str = Field(default_factory=dict)
    call_id: str | None = None
    calls: list[ToolCall] | None = None
    # A model slow to decide: the (non-streamed) answer comes this long after the request.
    delay_ms: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _one_form(self) -> "ToolCallStep":
        if (self.name is None) == (self.calls is None):
            raise ValueError("give either 'name' (one call) or 'calls' (several)")
        if self.calls is not None and not self.calls:
            raise ValueError("'calls' must not be empty")
        return self

    def all_calls(self) -> list[ToolCall]:
        if self.calls is not None:
            return self.calls
        return [ToolCall(name=self.name or "", arguments=self.arguments, call_id=self.call_id)]


class ErrorStep(_Step):
    action: Literal["error"]
    status: int = Field(ge=400, le=599)
    message: str | None = None
    type: str | None = None
    code: str | None = None
    param: str | None = None
    # For 429 the SDK-visible retry hints default to a short wait; set them to shape retries.
    retry_after_ms: int | None = None
    retry_after: float | None = None
    should_retry: bool | None = None


class StallStep(_Step):
    action: Literal["stall"]
    seconds: float | None = None  # None: until the client gives up
    after_deltas: int | None = None  # streaming only: stall mid-stream after K deltas
    text: str | None = None  # the answer if the stall ends and the client is still there


class SlowStep(_Step):
    action: Literal["slow"]
    delay_ms: int = Field(ge=0)
    text: str | None = None


class DropStreamStep(_Step):
    action: Literal["drop_stream"]
    after_deltas: int = Field(default=0, ge=0)
    text: str | None = None


class StreamErrorStep(_Step):
    """A failure after HTTP 200: `response.failed`, or an `error` event in either
    the documented flat shape or the observed wrapped shape (openai-wire.md 5.6)."""

    action: Literal["stream_error"]
    after_deltas: int = Field(default=0, ge=0)
    shape: Literal["failed", "error", "error_wrapped"] = "failed"
    code: str = "server_error"
    message: str = "The server had an error while processing your request. Sorry about that!"
    text: str | None = None


class SearchResultSpec(_Strict):
    url: str
    title: str = ""  # empty: the URL's host
    snippet: str = ""


class WebSearchStep(_Step):
    """A built-in web search, then an answer citing the results."""

    action: Literal["web_search"]
    query: str | None = None  # None: the user's last words
    results: list[SearchResultSpec] | None = None  # None: invented from the query (and allowed_domains)
    text: str | None = None  # None: one cited sentence per result
    # Cite results the text does not mention by appending `([host](url))` for each.
    append_citations: bool = True


AnyStep = TextStep | ToolCallStep | ErrorStep | StallStep | SlowStep | DropStreamStep | StreamErrorStep | WebSearchStep
Step = Annotated[AnyStep, Field(discriminator="action")]
steps_adapter: TypeAdapter[list[Step]] = TypeAdapter(list[Step])


@dataclass(frozen=True)
class RequestFacts:
    """What a step's `match` may look at."""

    endpoint: Literal["responses", "compact"]
    input_text: str
    instructions: str
    has_tool_output: bool
    model: str
    stream: bool
    tools: frozenset[str] = frozenset()  # tool types and function names the request offers
    item_types: frozenset[str] = frozenset()  # the types of the request's own input items


def matches(match: Match, facts: RequestFacts) -> bool:
    if match.endpoint != "any" and match.endpoint != facts.endpoint:
        return False
    if match.input_contains is not None and match.input_contains.lower() not in facts.input_text.lower():
        return False
    if match.instructions_contains is not None and (
        match.instructions_contains.lower() not in facts.instructions.lower()
    ):
        return False
    if match.has_tool_output is not None and match.has_tool_output != facts.has_tool_output:
        return False
    if match.model is not None and match.model != facts.model:
        return False
    if match.has_tool is not None and match.has_tool not in facts.tools:
        return False
    if match.has_item_type is not None and match.has_item_type not in facts.item_types:
        return False
    return match.stream is None or match.stream == facts.stream


class _Timed(Protocol):
    """A scripted step: served ``times`` times, listed by ``pending`` as its JSON."""

    times: int

    def model_dump(self, *, mode: str) -> dict[str, Any]: ...


S = TypeVar("S", bound=_Timed)


@dataclass
class _Queued(Generic[S]):
    step: S
    remaining: int


class StepQueue(Generic[S]):
    """A FIFO of scripted steps, each served ``times`` times: both APIs' scripts (``Script``, the
    realtime ``RealtimeScript``) differ only in which step a request wants."""

    def __init__(self) -> None:
        self._queue: list[_Queued[S]] = []

    def add(self, steps: list[S]) -> None:
        self._queue.extend(_Queued(step, step.times) for step in steps)

    def _take(self, wanted: Callable[[S], bool]) -> S | None:
        """The first queued step ``wanted``, used once."""
        entry = next((e for e in self._queue if wanted(e.step)), None)
        if entry is None:
            return None
        entry.remaining -= 1
        if entry.remaining == 0:
            self._queue.remove(entry)
        return entry.step

    def pending(self) -> list[dict[str, Any]]:
        return [{**e.step.model_dump(mode="json"), "remaining": e.remaining} for e in self._queue]

    def clear(self) -> None:
        self._queue.clear()


class Script(StepQueue[AnyStep]):
    def take(self, facts: RequestFacts) -> AnyStep | None:
        return self._take(lambda step: matches(step.match, facts))
