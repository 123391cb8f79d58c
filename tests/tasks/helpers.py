"""Shared steps of the tasks tests: create a task over HTTP, wait for its state, read its journal."""

from typing import Any

import httpx

from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.waiting import eventually


async def create(http: httpx.AsyncClient, goal: str, start_urls: list[str] | None = None,
                 **fields: Any) -> dict[str, Any]:
    reply = await http.post("/api/tasks", json={"goal": goal, "start_urls": start_urls or [], **fields})
    assert reply.status_code == 201, reply.text
    task: dict[str, Any] = reply.json()
    return task


async def get(http: httpx.AsyncClient, task_id: str) -> dict[str, Any]:
    reply = await http.get(f"/api/tasks/{task_id}")
    assert reply.status_code == 200, reply.text
    task: dict[str, Any] = reply.json()
    return task


async def wait_state(http: httpx.AsyncClient, task_id: str, *states: str, timeout: float = 60.0) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        try:
            task = await get(http, task_id)
        except AssertionError:
            return None  # the runner is between leaders (restarting): ask again
        return task if task["state"] in states else None

    return await eventually(check, f"task {task_id} in {states}", timeout=timeout)


async def journal(bus: Bus, task_id: str) -> list[Event]:
    """The task's span as the ledger has it, in commit order."""
    events: list[Event] = []
    after = 0
    while True:
        from delegate.contracts import topics

        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, span_id=task_id, limit=1000))
        events += reply.events
        if not reply.more or not reply.events:
            return events
        after = reply.events[-1].seq or after


def steps(events: list[Event], kind: str = "task.step") -> list[dict[str, Any]]:
    return [e.payload["data"] for e in events if e.kind == kind]


def tool_call(name: str, arguments: dict[str, Any], times: int = 1, delay_ms: int = 0,
              **match: Any) -> dict[str, Any]:
    """A stand-in script step: the model asks for one tool (only in a request offering it)."""
    return {"action": "tool_call", "name": name, "arguments": arguments, "times": times, "delay_ms": delay_ms,
            "match": {"has_tool": "browser_open", **match}}


def answer(text: str) -> dict[str, Any]:
    return {"action": "text", "text": text, "match": {"has_tool": "browser_open"}}


async def ended_journal(bus: Bus, task_id: str, timeout: float = 30.0) -> list[Event]:
    """The task's span once the ledger has its end (``span.closed`` follows the terminal event),
    without the run picture's artifact and the steps' model.usage (written beside the runner)."""

    async def check() -> list[Event] | None:
        # The run picture's artifact event may follow the end in the same span: not part of the run.
        events = [e for e in await journal(bus, task_id) if e.kind not in ("thoughtflow.artifact", "model.usage")]
        return events if events and events[-1].kind == "span.closed" else None

    return await eventually(check, f"task {task_id}'s span closed in the ledger", timeout=timeout)
