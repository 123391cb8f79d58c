"""A task over the owner's spend line pauses (``paused_by: budget``) and resumes when the line is raised.

Real gateway, ledger, agent (tool registry), tasks service and the OpenAI stand-in. The day's
spend is pushed over BUDGET_DAILY_USD by a committed ``model.usage`` (an expensive owner turn)
while the task's first model step is under way; the task pauses before its next model call.
"""

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import ModelUsage, make_event
from delegate.runtime.bus import Bus
from tests.inner_plane.harness import period_cut_to, period_from_now, room_for_a_start
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System, module_system

from .helpers import answer, create, ended_journal, tool_call, wait_state

pytestmark = [pytest.mark.integration]

# A budget period longer than any machine takes to pause a task in it: the test then cuts it short.
PERIOD_S = 300.0


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
            module_standin: StandinProcess) -> Iterator[System]:
    env = {
        "OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": module_standin.base_url,
        "TASKS_MAX_CONCURRENT": "1", "BUDGET_DAILY_USD": "1.0", "OWNER_TIMEZONE": "Europe/Berlin",
    }
    with module_system(tmp_path_factory.mktemp("task-budget"), request, "ledger", "agent", "tasks", "gateway",
                       env=env, separate=("tasks",)) as system:
        yield system


async def paused_over_the_line(http: httpx.AsyncClient, bus: Bus, goal: str) -> dict[str, Any]:
    """Create a task; once it runs, an expensive owner turn's usage pushes the day over the line
    (BUDGET_DAILY_USD=1): the task, paused by the budget."""
    task = await create(http, goal)
    await wait_state(http, task["id"], "running")
    pricey = make_event(ModelUsage(model="gpt-5.5", purpose="owner_turn", input_tokens=10**6, cost_usd=5.0),
                        conversation_id=None, span_id=None, channel="text")
    await bus.publish(topics.ledger_append("test"), pricey)
    paused = await wait_state(http, task["id"], "paused", timeout=60)
    assert paused["paused_by"] == "budget", paused
    return task


async def test_a_task_over_budget_pauses_and_resumes_when_the_budget_is_raised(
        running: System, http: httpx.AsyncClient, bus: Bus, module_standin: StandinProcess) -> None:
    module_standin.reset()
    # The first model step takes a while: the line is crossed meanwhile.
    module_standin.script(tool_call("no_such_tool", {}, delay_ms=4000), answer("all done"))
    task = await paused_over_the_line(http, bus, "Look something up")
    # At most the step under way when the line was crossed (the browser's start may take longer).
    calls_at_pause = len(module_standin.response_requests())
    assert calls_at_pause <= 1

    still = await wait_state(http, task["id"], "paused")
    assert still["paused_by"] == "budget" and len(module_standin.response_requests()) == calls_at_pause

    running.extra_env["BUDGET_DAILY_USD"] = "100"  # raised: the runner starts again with it
    running.kill("tasks")
    running.start("tasks")
    done = await wait_state(http, task["id"], "done", timeout=90)
    assert done["answer"] == "all done" and done["paused_by"] is None
    events = await ended_journal(bus, task["id"])
    pauses = [e.payload["data"] for e in events if e.kind == "task.paused"]
    resumes = [e.payload["data"] for e in events if e.kind == "task.resumed"]
    assert len(pauses) == 1 and pauses[0]["by"] == "budget" and pauses[0]["reason"] == "budget_usd"
    assert "daily budget $1.0000 (Europe/Berlin)" in pauses[0]["detail"]
    assert resumes == [{"by": "budget"}]


async def test_a_task_paused_by_the_budget_resumes_by_itself_in_the_next_period(
        running: System, http: httpx.AsyncClient, bus: Bus, module_standin: StandinProcess) -> None:
    # A period of the test's own, from now: the line is crossed and the task paused in it.
    running.extra_env.update({"BUDGET_DAILY_USD": "1.0", **period_from_now(PERIOD_S)})
    began = time.monotonic()
    running.kill("tasks")
    running.start("tasks")
    took = time.monotonic() - began
    module_standin.reset()
    module_standin.script(tool_call("no_such_tool", {}, delay_ms=2000), answer("done next period"))
    task = await paused_over_the_line(http, bus, "Look it up later if need be")
    # The same period (its start, so the spend in it), cut to end soon: the service started again
    # with it finds the task paused, keeps it so, and resumes it when the period turns, on its own.
    # What is left of the period is room for that start (as long as the one above) and a look.
    cut, period_end = period_cut_to(running.extra_env, room_for_a_start(took))
    running.extra_env.update(cut)
    running.kill("tasks")
    running.start("tasks")
    still = await wait_state(http, task["id"], "paused", "running", "done")
    assert still["state"] == "paused" and still["paused_by"] == "budget", still
    assert time.time() < period_end, "the period ended before the restarted service was seen holding the task"
    done = await wait_state(http, task["id"], "done", timeout=period_end - time.time() + 60)
    assert done["answer"] == "done next period"
    events = await ended_journal(bus, task["id"])
    paused_at = next(e.ts for e in events if e.kind == "task.paused")
    resumed = next(e for e in events if e.kind == "task.resumed")
    assert resumed.payload["data"] == {"by": "budget"}
    assert paused_at.timestamp() < period_end <= resumed.ts.timestamp(), "resumed in the same period"
