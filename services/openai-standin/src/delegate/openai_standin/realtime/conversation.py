"""The session's conversation: items in order, plus what the stand-in knows about
them that the wire does not carry (a user turn's transcript and script step, how much
audio an assistant item has sent)."""

import copy
from dataclasses import dataclass, field
from typing import Any

from delegate.openai_standin.ids import new_call_id, new_id
from delegate.openai_standin.realtime.script import RealtimeStep
from delegate.openai_standin.realtime.wire import EventError

Item = dict[str, Any]


@dataclass
class ItemFacts:
    heard: str = ""  # a user item's words (transcript or text)
    step: RealtimeStep | None = None  # the script step this user turn took
    answered: bool = False  # a response used this turn's step already
    audio_sent_ms: float = 0.0  # an assistant item's audio sent so far


@dataclass
class Conversation:
    id: str = field(default_factory=lambda: new_id("conv"))
    items: list[Item] = field(default_factory=list)
    facts: dict[str, ItemFacts] = field(default_factory=dict)

    def add(self, item: Item, previous_item_id: str | None = None) -> str | None:
        """Insert `item` after `previous_item_id` (`"root"`: first; None: last);
        returns the id of the item before it."""
        if previous_item_id is None:
            previous = self.items[-1]["id"] if self.items else None
            self.items.append(item)
        elif previous_item_id == "root":
            previous = None
            self.items.insert(0, item)
        else:
            index = self._index(previous_item_id)
            if index is None:
                raise EventError(
                    f"Previous item with id '{previous_item_id}' does not exist.",
                    code="item_not_found",
                    param="previous_item_id",
                )
            previous = previous_item_id
            self.items.insert(index + 1, item)
        self.facts.setdefault(item["id"], ItemFacts())
        return previous

    def get(self, item_id: str) -> Item | None:
        index = self._index(item_id)
        return None if index is None else self.items[index]

    def delete(self, item_id: str) -> bool:
        index = self._index(item_id)
        if index is None:
            return False
        del self.items[index]
        self.facts.pop(item_id, None)
        return True

    def facts_of(self, item_id: str) -> ItemFacts:
        return self.facts.setdefault(item_id, ItemFacts())

    def last_user_turn(self) -> Item | None:
        for item in reversed(self.items):
            if item.get("type") == "message" and item.get("role") == "user":
                return item
        return None

    def trailing_outputs(self) -> list[Item]:
        """The function_call_output items at the end (what a response reacts to)."""
        outputs: list[Item] = []
        for item in reversed(self.items):
            if item.get("type") != "function_call_output":
                break
            outputs.insert(0, item)
        return outputs

    def call_name(self, call_id: str) -> str:
        for item in self.items:
            if item.get("type") == "function_call" and item.get("call_id") == call_id:
                return str(item.get("name", "the tool"))
        return "the tool"

    def _index(self, item_id: str) -> int | None:
        for index, item in enumerate(self.items):
            if item.get("id") == item_id:
                return index
        return None


def client_item(raw: Item) -> Item:
    """A `conversation.item.create` item (one the spec took) as the server keeps it (id,
    object, status). MCP items are in the spec but not emulated."""
    item = copy.deepcopy(raw)
    kind = item["type"]
    if kind == "function_call":
        item.setdefault("call_id", new_call_id())
    elif kind not in ("message", "function_call_output"):
        raise EventError(f"The stand-in does not emulate '{kind}' items.", param="item.type")
    item.setdefault("id", new_id("item"))
    item["object"] = "realtime.item"
    item.setdefault("status", "completed")
    return item


def message_text(item: Item) -> str:
    parts = item.get("content") or []
    return " ".join(str(p.get("text") or p.get("transcript") or "") for p in parts if isinstance(p, dict)).strip()
