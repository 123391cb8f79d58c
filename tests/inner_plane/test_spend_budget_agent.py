"""The daily line with the real agent doing the work (issue #29, "What must be shown"): gateway,
ledger, agent, inner plane and the OpenAI stand-in, no part played by the test.

The agent records an activation's ``model.usage`` beside its call and its ``activation.outcome``
after the answer; the broker takes the next signal once the outcome is committed. If the usage
event could commit after the outcome, a burst at a line just above one activation's cost would
run a second activation before the spend reached the line. Periods are short and the test's own
(BUDGET_PERIOD_S counted from BUDGET_PERIOD_ORIGIN), so "the next day" comes within the test.
"""

import time
from collections.abc import AsyncIterator

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.signals import ScriptPayload, ScriptSignal
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import Harness, period_cut_to, period_from_now, plane_env, room_for_a_start

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Longer than any machine takes for the burst, two SIGKILLs and their checks: the test cuts the
# period short (period_cut_to) once it has shown the hold in it.
PERIOD_S = 300.0
BASE = {
    "OPENAI_MODEL": "gpt-5.5",  # priced in the shipped table
    "OWNER_TIMEZONE": "UTC",
    "INNER_DAILY_BUDGET": "1000",
    "INNER_MIN_WAKE_GAP_S": "0",
    "INNER_COALESCE_S": "0.2",
    "IDLE_SPAN_SECONDS": "600",
    "COMPACT_THRESHOLD": "1000000",
    "CAPSULE_THRESHOLD": "0.9",
    "BUDGET_BACKGROUND_CALLS_PER_MIN": "1000",
}


@pytest.fixture
async def h(system: System, standin: StandinProcess) -> AsyncIterator[Harness]:
    system.extra_env.update(plane_env(standin, **BASE))
    system.start("ledger", "agent", "inner-plane", "gateway", separate=("ledger", "inner-plane"))
    harness = await Harness.connect(system)
    yield harness
    await harness.close()


async def outcomes(h: Harness) -> list[Event]:
    return await h.events(kinds=["activation.outcome"])


async def activation_usage(h: Harness) -> list[Event]:
    return [e for e in await h.events(kinds=["model.usage"]) if e.payload["purpose"] == "activation"]


async def decisions_of(h: Harness, signal: ScriptSignal) -> list[tuple[str, str]]:
    return [
        (d.payload["decision"], d.payload["reason"])
        for d in await h.events(kinds=["inner.decision"])
        if d.parent_id == signal.id
    ]


async def test_a_burst_at_a_line_just_above_one_activation_runs_one_with_the_real_agent(
    system: System, h: Harness
) -> None:
    # Activations without a line: what one costs with this model and stand-in. The first reads
    # the whole prompt uncached (several times dearer); later ones read it cached: the last one
    # is what the burst's will cost.
    for n in range(3):
        await h.bus.publish(
            topics.INNER_SIGNAL, ScriptSignal(source=f"measure-{n}", payload=ScriptPayload(text=f"measure {n}"))
        )

        async def done(count: int = n + 1) -> list[Event] | None:
            found = await activation_usage(h)
            return found if len(found) >= count and len(await outcomes(h)) >= count else None

        await eventually(done, f"measuring activation {n}", 60.0)
    measured = await activation_usage(h)
    assert len(measured) == 3, "one model call per activation"
    cost = measured[-1].payload["cost_usd"]
    assert cost > 0
    line = round(cost * 1.3, 6)  # just above one activation's cost

    # A fresh period, after the measured ones, the line drawn (the inner plane restarted with it, SIGKILL).
    period = period_from_now(PERIOD_S)
    begun = float(period["BUDGET_PERIOD_ORIGIN"])
    assert all(e.ts.timestamp() < begun for e in measured)
    system.extra_env.update({"BUDGET_DAILY_USD": str(line), **period})
    system.kill("inner-plane")
    system.start("inner-plane")
    before = {e.id for e in await outcomes(h)}

    burst = [ScriptSignal(source=f"burst-{n}", payload=ScriptPayload(text=f"look at {n}")) for n in range(10)]
    for s in burst:
        await h.bus.publish(topics.INNER_SIGNAL, s)

    async def settled() -> bool:
        kinds = [await decisions_of(h, s) for s in burst]
        return all(("hold", "budget_usd") in k or any(d == "act" for d, _ in k) for k in kinds)

    await eventually(settled, "one activation and nine held with budget_usd", 60.0)
    acted = [s for s in burst if any(d == "act" for d, _ in await decisions_of(h, s))]
    assert len(acted) == 1, f"{len(acted)} activations ran at a line just above one's cost"
    for s in burst:
        if s not in acted:
            assert [r for _, r in await decisions_of(h, s)] == ["budget_usd"]

    async def told() -> list[Event] | None:
        return await h.events(kinds=["budget.notice"]) or None

    [notice] = await eventually(told, "the owner told of the line")
    assert notice.payload["reason"] == "budget_usd" and notice.payload["channel"] == "timeline"
    assert notice.payload["daily_limit_usd"] == pytest.approx(line)

    # SIGKILL the ledger and the inner plane (its state file lost): the spend is the ledger's.
    async def ran_in_period() -> list[Event] | None:
        found = [e for e in await activation_usage(h) if e.ts.timestamp() >= begun]
        return found if len(await outcomes(h)) > len(before) else None

    [spent] = await eventually(ran_in_period, "the burst's activation answered")
    began = time.monotonic()
    system.kill("ledger")
    system.start("ledger")
    system.kill("inner-plane")
    (system.runtime / "inner-plane" / "state.json").unlink()
    # The new plane's period is the same one (its start, its key), cut to end soon after this:
    # the plane's start and the checks of what it rebuilt fit in what is left.
    cut, period_end = period_cut_to(system.extra_env, room_for_a_start(time.monotonic() - began))
    system.extra_env.update(cut)
    system.start("inner-plane")
    await h.processed((await h.events(kinds=["inner.decision"]))[-1].seq or 0)
    assert time.time() < period_end, "the test ran past its period: too slow to show the hold"
    assert len([e for e in await outcomes(h) if e.id not in before]) == 1
    assert len(await h.events(kinds=["budget.notice"])) == 1
    assert spent.payload["cost_usd"] < line

    # The next period: the held signals run again, one activation, then the line holds again.
    async def next_period() -> list[Event] | None:
        found = await h.events(kinds=["budget.notice"])
        return found if len(found) == 2 else None

    notices = await eventually(next_period, "the line reached again in the next period", period_end - time.time() + 60)
    assert notices[0].payload["period"] != notices[1].payload["period"]

    # The activation's spend (its model.usage) is what holds the next signal, so the notice can
    # be committed before the agent's outcome of that activation.
    async def ran_again() -> list[Event] | None:
        found = [e for e in await outcomes(h) if e.id not in before]
        return found if len(found) >= 2 else None

    assert len(await eventually(ran_again, "the next period's one activation answered")) == 2


async def test_the_runaway_guard_stops_a_loop_of_real_activations(system: System, h: Harness) -> None:
    # A script that answers every activation with another signal: a loop only the guard ends. Each
    # activation is one model call; the guard allows 3 background calls a minute.
    system.extra_env["BUDGET_BACKGROUND_CALLS_PER_MIN"] = "3"
    system.kill("inner-plane")
    system.start("inner-plane")
    ran: list[ScriptSignal] = []
    held: ScriptSignal | None = None
    for n in range(10):
        signal = ScriptSignal(source=f"loop-{n}", payload=ScriptPayload(text=f"again {n}"))
        await h.bus.publish(topics.INNER_SIGNAL, signal)

        async def settled(s: ScriptSignal = signal, done: int = len(ran)) -> str | None:
            found = await decisions_of(h, s)
            if ("hold", "runaway") in found:
                return "held"
            acted = any(d == "act" for d, _ in found)
            return "ran" if acted and len(await outcomes(h)) > done else None

        if await eventually(settled, f"loop signal {n} run or held", 60.0) == "held":
            held = signal
            break
        ran.append(signal)
    assert held is not None, "the guard let the loop run on"
    # The fourth call in a minute passes the guard's three: the fifth signal waits.
    assert len(ran) == 4
    assert len(await activation_usage(h)) == 4

    async def told() -> list[Event] | None:
        return [e for e in await h.events(kinds=["budget.notice"]) if e.payload["reason"] == "runaway"] or None

    [notice] = await eventually(told, "the owner told of the runaway")
    assert "background model calls within a minute (the guard allows 3)" in notice.payload["detail"]
    # However long the loop keeps signalling, nothing more runs while the guard holds.
    more = [ScriptSignal(source=f"loop-more-{n}", payload=ScriptPayload(text="and again")) for n in range(3)]
    for signal in more:
        await h.bus.publish(topics.INNER_SIGNAL, signal)

    async def all_held() -> bool:
        return all([("hold", "runaway") in await decisions_of(h, s) for s in more])

    await eventually(all_held, "the loop's further signals held")
    assert len(await outcomes(h)) == 4 and len(await activation_usage(h)) == 4
    assert len([e for e in await h.events(kinds=["budget.notice"]) if e.payload["reason"] == "runaway"]) == 1
