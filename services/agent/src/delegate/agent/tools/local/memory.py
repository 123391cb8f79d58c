"""memory_remember, memory_recall, memory_forget: the model's hands on the owner's memory.

Memory lives in the memory service (``memory.cmd.*``), and every change to it is an event
through the ledger, so these tools keep no store of their own. A remembered fact cites the
turn it was said in (the user message the tool call answers); the tool call's id is the
request id, so a call run again (a retried request of the same response) stores nothing twice.
"""

import json
from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar

from delegate.contracts import topics
from delegate.contracts.events import FactType
from delegate.contracts.ids import format_ts
from delegate.contracts.memory import (
    MemoryFactsCommand,
    MemoryFactsReply,
    MemoryResult,
    MemorySearchReply,
    MemorySearchRequest,
)
from delegate.contracts.people import CommitmentsCommand, CommitmentsReply
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from ..base import CURRENT_CALL, FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema

TAGS = ("local", "memory")
WRITES = (*TAGS, SIDE_EFFECT)  # what is remembered or forgotten shapes every later turn
FACT_TYPES: tuple[FactType, ...] = ("fact", "preference", "commitment", "adaptation")
NOT_FOUND = ("not_found",)  # the memory service's code for an unknown fact id
R = TypeVar("R")


class MemoryDesk(Protocol):
    async def search(self, req: MemorySearchRequest) -> MemorySearchReply: ...

    async def facts(self, cmd: MemoryFactsCommand) -> MemoryFactsReply: ...

    async def commitments(self, cmd: CommitmentsCommand) -> CommitmentsReply: ...


class BusMemoryDesk:
    """The memory service's queries, over the bus."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus

    async def search(self, req: MemorySearchRequest) -> MemorySearchReply:
        return await self.bus.request(topics.MEMORY_SEARCH, req)

    async def facts(self, cmd: MemoryFactsCommand) -> MemoryFactsReply:
        return await self.bus.request(topics.MEMORY_FACTS, cmd)

    async def commitments(self, cmd: CommitmentsCommand) -> CommitmentsReply:
        return await self.bus.request(topics.MEMORY_COMMITMENTS, cmd)


def result_line(item: MemoryResult) -> str:
    """One result for the model: kind, id, date, text, and what it stands for."""
    shown: dict[str, Any] = {"kind": item.kind, "id": item.id, "date": format_ts(item.ts), "text": item.text}
    if item.type:
        shown["type"] = item.type
    for key in ("channel", "speaker"):
        if value := getattr(item, key):
            shown[key] = value
    if item.event_ids:
        shown["event_ids"] = item.event_ids[:10]
    if item.refs:
        shown["refs"] = item.refs[:10]
    return json.dumps(shown, ensure_ascii=False)


def _unreachable(exc: Exception) -> ToolError:
    return ToolError(UNAVAILABLE, f"the memory service cannot be reached right now ({exc}); try again later")


async def _ask(request: Awaitable[R], *, not_found: str | None = None) -> R:
    """The memory service's reply; its failures as the ``ToolError`` the model reads (``not_found``
    for a fact it does not know, when given)."""
    try:
        return await request
    except BusUnavailable as exc:
        raise _unreachable(exc) from exc
    except RemoteError as exc:
        if not_found is not None and exc.code in NOT_FOUND:
            raise ToolError(FAILED, not_found) from exc
        raise ToolError(FAILED, exc.message or exc.code) from exc


def memory_tools(desk: MemoryDesk | None) -> list[Tool]:
    """Always offered; without a bus to the memory service they say it is unavailable."""

    def require() -> MemoryDesk:
        if desk is None:
            raise ToolError(UNAVAILABLE, "memory is not connected in this process")
        return desk

    async def remember(args: dict[str, Any]) -> str:
        call = CURRENT_CALL.get()
        cites = [e for e in ((call.parent_id if call else None), (call.event_id if call else None)) if e]
        cmd = MemoryFactsCommand(
            op="remember", text=args["text"], type=args.get("type", "fact"),
            request_id=call.call_id if call else None, event_ids=cites,
            conversation_id=call.conversation_id if call else None, span_id=call.span_id if call else None,
        )
        reply = await _ask(require().facts(cmd))
        fact = reply.fact
        if fact is None:
            return "Remembered."
        return f"Remembered {fact.id} ({fact.type}): {fact.text}"

    async def recall(args: dict[str, Any]) -> str:
        req = MemorySearchRequest(query=args["query"], limit=args.get("limit", 10), purpose="turn")
        reply = await _ask(require().search(req))
        if not reply.results:
            return f"Nothing remembered about {args['query']!r}."
        return "\n".join(result_line(r) for r in reply.results)

    async def forget(args: dict[str, Any]) -> str:
        call = CURRENT_CALL.get()
        cmd = MemoryFactsCommand(
            op="forget", fact_id=args["id"], reason=args.get("reason", ""),
            request_id=call.call_id if call else None,
        )
        reply = await _ask(
            require().facts(cmd), not_found=f"no fact with id {args['id']!r}; use memory_recall to find ids"
        )
        # Only the id: repeating the forgotten text would put it back into the conversation.
        return f"Forgot {reply.fact.id if reply.fact else args['id']}; it will not be recalled again."

    kinds = {"type": "string", "enum": list(FACT_TYPES),
             "description": "fact (default), preference, commitment, or adaptation (how the owner wants to be "
                            "addressed or answered)"}
    return [
        Tool("memory_remember",
             "Remember a durable fact, preference, commitment or adaptation about the owner, in their words.",
             object_schema({"text": {"type": "string", "minLength": 1, "maxLength": 2000}, "type": kinds}, ["text"]),
             remember, WRITES),
        Tool("memory_recall",
             "Search the owner's memory (facts, past episodes, earlier messages on every channel); best first, "
             "each with its kind, id and date.",
             object_schema({"query": {"type": "string", "minLength": 1, "maxLength": 4000},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}}, ["query"]),
             recall, TAGS),
        Tool("memory_forget", "Forget one remembered fact by its id: it is never recalled or retrieved again.",
             object_schema({"id": {"type": "string", "minLength": 1, "maxLength": 64},
                            "reason": {"type": "string", "maxLength": 500}}, ["id"]), forget, WRITES),
    ]
