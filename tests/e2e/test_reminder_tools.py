"""Reminders end to end: the model sets one through the agent's tool, and it fires exactly once;
a recurring one fires once per occurrence across 20 random restarts of the inner plane and agent.

Real processes: nats-server, ledger, agent, inner plane, and the OpenAI stand-in scripted to
call ``set_reminder``. What counts is what the ledger committed: one ``inner.signal`` of kind
``reminder.due`` per occurrence, never two, none missing.
"""

import os
import random
import re
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timedelta

import pytest

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import UserInput
from delegate.contracts.reminders import ReminderSpec
from delegate.inner_plane.context import derived_id
from tests.agent.rig import agent_env
from tests.inner_plane.harness import Harness, plane_env
from tests.inner_plane.reminders_rig import ask, ask_when_ready, barrier, due_at, fired, fires
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RESTARTS = 20
EVERY_S = 2


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[System]:
    env = {
        **plane_env(module_standin), **agent_env(module_standin), "OWNER_TIMEZONE": "UTC", "IDLE_SPAN_SECONDS": "600",
    }
    with module_system(
        tmp_path_factory.mktemp("reminder-tools"), request, "ledger", "agent", "inner-plane", env=env,
        separate=("agent", "inner-plane"),
        extra_log=lambda: "\n===== standin\n" + module_standin.log_text()[-6000:],
    ) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    yield harness
    await harness.close()


async def test_a_reminder_set_through_the_agents_tool_fires_once_on_time(
    h: Harness, module_standin: StandinProcess
) -> None:
    at = (utcnow() + timedelta(seconds=6)).replace(microsecond=0)
    module_standin.script(
        {"action": "tool_call", "name": "set_reminder", "call_id": "call_remind_1",
         "arguments": {"text": "Stretch your legs", "at": at.isoformat()}},
        {"action": "text", "text": "I'll remind you.", "match": {"has_tool_output": True}},
    )
    said = UserInput(text="Remind me to stretch my legs in a few seconds", channel="text")
    await h.bus.publish(topics.AGENT_INPUT, said, msg_id=said.id)

    async def tool_result() -> dict[str, object] | None:
        found = [e for e in await h.events(kinds=["tool.result"]) if e.payload.get("call_id") == "call_remind_1"]
        return found[0].payload if found else None

    result = await eventually(tool_result, "the set_reminder result", timeout=60)
    assert result["ok"] is True, result
    match = re.search(r"\[([^\]]+)\]", str(result["output"]))
    assert match is not None, result
    reminder_id = match.group(1)
    [defined] = [e for e in await h.events(kinds=["reminder.set"]) if e.payload["reminder_id"] == reminder_id]
    [call] = [e for e in await h.events(kinds=["tool.call"]) if e.payload.get("call_id") == "call_remind_1"]
    assert defined.parent_id == call.id and defined.payload["spec"]["text"] == "Stretch your legs"

    [fire] = await fired(h, reminder_id)
    await barrier(h)
    assert await fires(h, reminder_id) == [fire]
    assert due_at(fire) == at and fire.ts >= at
    assert fire.payload["signal"]["payload"]["text"] == "Stretch your legs"


async def test_the_model_sets_changes_lists_and_cancels_through_the_tools(
    h: Harness, module_standin: StandinProcess
) -> None:
    # The tool call id is the request id: the reminder's id follows from it, before it exists.
    reminder_id = derived_id("reminder", "call_rent_set")
    calls = [
        ("call_rent_set", "set_reminder", {"text": "Pay the rent", "in_seconds": 3600}),
        ("call_rent_change", "change_reminder",
         {"reminder_id": reminder_id, "cron": "0 9 1 * *", "timezone": "Europe/Berlin"}),
        ("call_rent_list", "list_reminders", {}),
        ("call_rent_cancel", "cancel_reminder", {"reminder_id": reminder_id, "reason": "paid by standing order"}),
    ]
    module_standin.script(
        *({"action": "tool_call", "name": name, "call_id": call_id, "arguments": arguments,
           "match": {"has_tool_output": n > 0, "has_tool": name}}
          for n, (call_id, name, arguments) in enumerate(calls)),
        {"action": "text", "text": "Done.", "match": {"has_tool_output": True}},
    )
    before = utcnow()
    said = UserInput(text="Remind me to pay the rent in an hour", channel="text")
    await h.bus.publish(topics.AGENT_INPUT, said, msg_id=said.id)

    async def results() -> dict[str, dict[str, object]] | None:
        found = {e.payload["call_id"]: e.payload for e in await h.events(kinds=["tool.result"])}
        return found if all(call_id in found for call_id, _, _ in calls) else None

    outputs = await eventually(results, "the four tool results", timeout=90)
    assert all(outputs[call_id]["ok"] for call_id, _, _ in calls), outputs
    assert f"[{reminder_id}]" in str(outputs["call_rent_set"]["output"])
    assert "cron '0 9 1 * *' (Europe/Berlin)" in str(outputs["call_rent_change"]["output"])
    assert reminder_id in str(outputs["call_rent_list"]["output"])
    assert "cancelled" in str(outputs["call_rent_cancel"]["output"])
    events = [e for e in await h.events() if e.kind.startswith("reminder.") and e.payload["reminder_id"] == reminder_id]
    assert [e.kind for e in events] == ["reminder.set", "reminder.changed", "reminder.cancelled"]
    # The delay became an absolute time when the tool ran.
    at = datetime.fromisoformat(events[0].payload["spec"]["at"])
    assert before + timedelta(seconds=3600) <= at <= utcnow() + timedelta(seconds=3600)
    assert events[2].payload["reason"] == "paid by standing order"


async def test_a_recurring_reminder_fires_once_per_occurrence_across_random_restarts(
    h: Harness, running: System
) -> None:
    seed = int(os.environ.get("REMINDER_RESTART_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    spec = ReminderSpec(text="tick", rrule=f"FREQ=SECONDLY;INTERVAL={EVERY_S}")
    reminder = (await ask_when_ready(h.bus, op="set", spec=spec)).reminders[0]
    assert reminder.next_due is not None
    first_due = reminder.next_due
    plan: list[str] = []
    for _ in range(RESTARTS):
        seen = len(await fires(h, reminder.id))
        targets = rng.choice([("inner-plane",), ("agent",), ("inner-plane", "agent"), ("agent", "inner-plane")])
        for name in targets:
            how = rng.choice(["SIGKILL", "SIGTERM"])
            plan.append(f"{how} {name}")
            if how == "SIGKILL":
                running.kill(name)
            else:
                running.procs[name].stop()
        for name in targets:
            running.procs[name].start()
        # Progress before the next round: at least one more occurrence claimed since the kill.
        await fired(h, reminder.id, seen + 1, timeout=60)

    end = utcnow()
    await eventually(
        lambda: _fired_since(h, reminder.id, end), f"an occurrence due after {end} (seed {seed})", timeout=60
    )
    await ask_when_ready(h.bus, op="cancel", reminder_id=reminder.id)
    await barrier(h, utcnow() + timedelta(seconds=EVERY_S))
    dues = [due_at(e) for e in await fires(h, reminder.id)]
    context = f"seed {seed}: {plan}"
    assert len(dues) == len(set(dues)), context  # none twice
    assert sorted(dues) == dues, context
    expected = [first_due + timedelta(seconds=EVERY_S * n) for n in range(len(dues))]
    assert dues == expected, context  # every occurrence from the first to the last, none missing
    assert dues[-1] >= end, context
    [state] = [r for r in (await ask(h.bus, op="list", include_done=True)).reminders if r.id == reminder.id]
    assert state.status == "cancelled" and state.fired == len(dues), context


async def _fired_since(h: Harness, reminder_id: str, moment: datetime) -> bool:
    return any(due_at(e) >= moment for e in await fires(h, reminder_id))
