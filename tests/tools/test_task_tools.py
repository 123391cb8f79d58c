"""start_task and check_task in the real agent process, called over tools.cmd.call as a turn or voice
calls them, against the real tasks service (the model is never reached here, so the tasks it
starts fail, which is what check_task then reports); the agent asks it under its own NATS role."""

from collections.abc import AsyncIterator
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.contracts.tasks import TASKS_POLICY
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_client import LedgerClient
from tests.support.system import System
from tests.support.waiting import eventually

from .agent_process import OFFLINE_MODEL, offered
from .helpers import bus_call

pytestmark = pytest.mark.integration


@pytest.fixture
async def bus(system: System) -> AsyncIterator[Bus]:
    # One failed model call ends a task quickly: the model is unreachable on purpose.
    system.extra_env.update(OFFLINE_MODEL, TASKS_MAX_FAILURES="1")
    system.start("ledger", "agent")
    assert system.nats is not None
    connection = await Bus.connect(system.nats.url, "task-tools-test")
    await offered(connection, "base", "start_task", "check_task")
    yield connection
    await connection.close()


async def created(bus: Bus) -> list[Event]:
    """Every task.created the ledger holds once it committed all that was published to it (the
    tasks service answers a call once its event is in the stream, before the ledger commits it)."""
    await LedgerClient(bus, "test").wait_caught_up()
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["task.created"], limit=100))
    return reply.events


async def test_start_task_asks_the_tasks_service_once_per_tool_call(system: System, bus: Bus) -> None:
    args: dict[str, Any] = {"goal": "Find three quiet cafés near the office open on Sundays",
                            "start_urls": ["https://example.test/cafes"], "budget": {"steps": 12}}
    nobody = await bus_call(bus, "start_task", args, call_id="call_task_0")
    assert nobody.error_code == "unavailable" and "the tasks service is not answering" in nobody.output
    assert (await bus_call(bus, "check_task", {})).error_code == "unavailable"

    system.start("tasks")
    started = await bus_call(bus, "start_task", args, call_id="call_task_1")
    assert started.ok, started.output
    [event] = await eventually(lambda: created(bus), what="the task.created event")
    data = event.payload["data"]
    assert f"Started task {event.payload['task_id']}" in started.output and "Tasks panel" in started.output
    assert (data["goal"], data["start_urls"], data["source"]) == (args["goal"], args["start_urls"], "agent")
    assert data["budget"]["steps"] == 12 and data["budget"]["seconds"] == 1800.0  # the rest: the service's
    assert data["idempotency_key"] == "agent-call:call_task_1"
    assert data["allow_tools"] == []  # only the owner enables side effects for a task

    # The same call run again (a redelivered turn): the same key, so no second task.
    again = await bus_call(bus, "start_task", args, call_id="call_task_1")
    assert again.ok and event.payload["task_id"] in again.output
    assert len(await created(bus)) == 1

    # A call id too long for a key still gives one stable key.
    long_id = "call_" + "x" * 300
    for _ in range(2):
        assert (await bus_call(bus, "start_task", {"goal": "Compare two lamps"}, call_id=long_id)).ok
    keys = [e.payload["data"]["idempotency_key"] for e in await created(bus)]
    assert len(keys) == 2 and len(keys[1]) <= 200

    # What the service could not take is said, before anything is asked of it.
    ftp = await bus_call(bus, "start_task", {"goal": "x", "start_urls": ["ftp://example.test"]})
    blank = await bus_call(bus, "start_task", {"goal": "   "})
    assert ftp.error_code == "invalid_arguments" and blank.error_code == "invalid_arguments"
    assert "the goal is empty" in blank.output
    # A task may not start tasks: refused by the registry, never asked of the tasks service.
    refused = await bus_call(bus, "start_task", {"goal": "Start more tasks"}, agent=TASKS_POLICY)
    assert refused.error_code == "denied"
    assert len(await created(bus)) == 2


async def test_check_task_tells_state_steps_and_why_it_failed(system: System, bus: Bus) -> None:
    system.start("tasks")
    first = await bus_call(bus, "start_task", {"goal": "Find the museum's opening hours", "budget": {"steps": 20}},
                           call_id="call_check_1")
    second = await bus_call(bus, "start_task", {"goal": "Book a table"}, call_id="call_check_2")
    assert first.ok and second.ok, (first.output, second.output)
    ids = [e.payload["task_id"] for e in await eventually(
        lambda: _two(created(bus)), what="both tasks created")]

    async def failed(task_id: str) -> str | None:
        reply = await bus_call(bus, "check_task", {"task_id": task_id})
        return reply.output if "[failed]" in reply.output else None

    one = await eventually(lambda: failed(ids[0]), what="the first task failed (no model)")
    assert f"Task {ids[0]} [failed]: Find the museum's opening hours" in one
    assert "of at most 20 steps" in one and "Error (error):" in one

    overview = await bus_call(bus, "check_task", {})
    assert overview.ok and overview.output.startswith("The 2 newest task(s):")
    assert overview.output.index(ids[1]) < overview.output.index(ids[0])  # newest first

    missing = await bus_call(bus, "check_task", {"task_id": "no-such-task"})
    assert missing.error_code == "failed" and "there is no task 'no-such-task'" in missing.output


async def _two(events: Any) -> list[Event] | None:
    found: list[Event] = await events
    return found if len(found) == 2 else None
