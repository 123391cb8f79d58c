"""Helpers of the memory tests: asking the real memory service, and reading what a request was given."""

from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import FactType
from delegate.contracts.memory import MemoryFact, MemoryFactsCommand, MemoryResult, MemorySearchRequest, Purpose
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.waiting import eventually

SERVICES = ("ledger", "memory", "agent")
# Generous: these tests check what memory gives, not how fast (the late tests set 0).
ON_TIME = {"MEMORY_RETRIEVAL_WAIT_MS": "5000"}
AGENT_MARK = "You are Delegate, a personal assistant"  # the agent's BASE_INSTRUCTIONS open so


async def search(bus: Bus, query: str, purpose: Purpose = "owner", **fields: Any) -> Any:
    return await bus.request(topics.MEMORY_SEARCH, MemorySearchRequest(query=query, purpose=purpose, **fields))


async def findable(bus: Bus, query: str, needle: str, *, purpose: Purpose = "owner", timeout: float = 30.0) -> None:
    """Wait until memory finds ``needle`` for ``query`` (indexing follows the ledger, a moment behind)."""
    last: list[Any] = [None]

    async def found() -> bool:
        try:
            reply = await search(bus, query, purpose)
        except Exception as exc:  # the service may still be starting
            last[0] = exc
            return False
        results: list[MemoryResult] = [*reply.results, *reply.adaptations]
        last[0] = [r.text for r in results]
        return any(needle.lower() in r.text.lower() for r in results)

    await eventually(found, f"memory to find {needle!r} for {query!r}", timeout, explain=lambda: f"last: {last[0]}")


async def remember(bus: Bus, text: str, type: FactType = "fact", request_id: str | None = None) -> MemoryFact:
    reply = await bus.request(
        topics.MEMORY_FACTS, MemoryFactsCommand(op="remember", text=text, type=type, request_id=request_id)
    )
    assert reply.fact is not None, reply
    return reply.fact


async def forget(bus: Bus, fact_id: str) -> None:
    reply = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="forget", fact_id=fact_id))
    assert reply.error is None, reply


async def facts(bus: Bus) -> list[MemoryFact]:
    return list((await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list"))).facts)


def agent_bodies(standin: StandinProcess) -> list[dict[str, Any]]:
    """The agent's own model requests (not the memory service's extraction or others)."""
    return [
        r["body"] for r in standin.response_requests()
        if str(r["body"].get("instructions", "")).startswith(AGENT_MARK)
    ]


def section(instructions: str, heading: str) -> str:
    """One ``## heading`` section of the instructions ("" when there is none)."""
    start = instructions.find(f"{heading}\n")
    if start < 0:
        return ""
    end = instructions.find("\n## ", start + len(heading))
    return instructions[start:] if end < 0 else instructions[start:end]


def memory_of(body: dict[str, Any]) -> str:
    return section(str(body.get("instructions", "")), "## Memory")
