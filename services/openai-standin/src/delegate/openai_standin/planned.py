"""What the fake model decided a response holds, before it becomes output items.

Kept apart from `generator` so the offline demo's behaviours (`demo`, `intents`,
`capsule_writer`) can plan answers without importing the generator that calls them."""

from dataclasses import dataclass
from typing import Any

from delegate.openai_standin.items import Item
from delegate.openai_standin.websearch import SearchResult


@dataclass(frozen=True)
class PlannedText:
    text: str
    annotations: tuple[dict[str, Any], ...] = ()


# A plain frozen record like facts.TurnLine: the same shape, a different thing.
@dataclass(frozen=True)
class PlannedCall:
    name: str
    arguments: str
    call_id: str


@dataclass(frozen=True)
class PlannedSearch:
    query: str
    results: tuple[SearchResult, ...]


Planned = PlannedText | PlannedCall | PlannedSearch


@dataclass(frozen=True)
class ModelInput:
    """The parts of a create request the fake model looks at."""

    items: list[Item]
    tools: list[dict[str, Any]]
    tool_choice: object
    text_format: dict[str, Any] | None
    max_tool_calls: object = None
    instructions: str = ""
    # The offline demo's behaviours (first-run guide, notes, reminders, capsule) are on.
    demo: bool = False
