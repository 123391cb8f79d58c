"""Budgets that hold (issue #29 item 3), with the real ledger and inner plane.

The test plays the agent: it reads each activation the broker sends off the AGENT stream and
answers with what the agent's metered model call and its outcome commit (a ``model.usage`` of a
known cost, then ``activation.outcome``). It also plays the pollers' side of the outbox: it
reads the CHANNELS stream, where the owner's SMS goes out. Periods are short and the tests'
own (BUDGET_PERIOD_S counted from BUDGET_PERIOD_ORIGIN), so "the next day" comes within the test,
and a fresh one begins when a test needs it.
"""

import json
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from delegate.contracts import streams, topics
from delegate.contracts.budget import BudgetReply
from delegate.contracts.channels import OutboundEmail, OutboundSms
from delegate.contracts.events import ActivationOutcome, Checkpoint, ContextUsage, Event, Message, ModelUsage
from delegate.contracts.messages import ActivationInput
from delegate.contracts.signals import ScriptPayload, ScriptSignal
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.waiting import eventually

from .harness import (
    CAPSULE_MARK,
    MEMORY_MARK,
    Harness,
    model_requests,
    period_cut_to,
    period_from_now,
    plane_env,
    room_for_a_start,
)
from .harness import restart_plane as restart_with

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Longer than any machine takes to show a hold in it: a test cuts the period short (period_cut_to)
# once it has shown what it must within it.
PERIOD_S = 300.0
TURN_COST = 0.010
BASE = {
    "OWNER_TIMEZONE": "UTC",
    "INNER_DAILY_BUDGET": "1000",
    "INNER_MIN_WAKE_GAP_S": "0",
    "INNER_COALESCE_S": "0.2",
    "IDLE_SPAN_SECONDS": "600",
    "BUDGET_DAILY_USD": "0.012",  # just above one activation's cost
    "BUDGET_BACKGROUND_CALLS_PER_MIN": "1000",
}


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[System]:
    with module_system(
        tmp_path_factory.mktemp("spend"), request, "ledger", "inner-plane", "gateway",
        env={**plane_env(module_standin), **BASE, **period_from_now(PERIOD_S)}, separate=("ledger", "inner-plane"),
    ) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    await harness.stand_in_for_the_agent()
    await harness.bus.ensure_streams([spec for spec in streams.STREAMS if spec.owner == "pollers"])
    yield harness
    await harness.close()


def restart_plane(system: System, *, keep_state: bool = True, **env: str) -> None:
    restart_with(system, BASE, keep_state=keep_state, **env)


async def plane_logged(system: System, text: str) -> bool:
    """Whether the inner plane logged ``text``: a held worker says so once it has looked."""
    return text in system.procs["inner-plane"].log_text()


async def activations(h: Harness) -> list[ActivationInput]:
    return [m for m in await h.agent_inputs() if m.type == "activation"]


async def play_the_agent(h: Harness, answered: set[str], cost: float = TURN_COST, calls: int = 1) -> list[str]:
    """Answer every activation not answered yet: its metered model call(s), then its outcome."""
    done = []
    for act in await activations(h):
        if act.id in answered:
            continue
        for _ in range(calls):
            await h.append(ModelUsage(model="gpt-5.5", purpose="activation", cause_id=act.id, input_tokens=1000,
                                      output_tokens=200, cost_usd=cost / calls), conversation_id=None, span_id=None,
                           channel="inner")
        await h.append(ActivationOutcome(status="completed", summary="done"), conversation_id=None, span_id=None,
                       channel="inner", parent_id=act.id)
        answered.add(act.id)
        done.append(act.id)
    return done


async def decisions(h: Harness, signal_id: str) -> list[Event]:
    return [e for e in await h.events(kinds=["inner.decision"]) if e.parent_id == signal_id]


async def outbox_sms(h: Harness) -> list[OutboundSms]:
    """The SMS the outbox holds for the pollers to send."""
    return [OutboundSms.model_validate_json(m.data) for m in await h.stream_messages("CHANNELS")
            if m.subject == topics.SMS_OUT.subject]


async def budget(system: System) -> BudgetReply:
    """GET /api/usage/budget, as the owner's client reads it."""
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth()) as http:
        response = await http.get("/api/usage/budget")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) >= {"daily", "monthly", "timezone", "background_held"}
    assert set(body["daily"]) == {"limit_usd", "spent_usd", "left_usd"}
    return BudgetReply.model_validate(body)


async def test_a_burst_over_the_daily_line_is_held_told_once_and_runs_in_the_next_period(
    running: System, h: Harness
) -> None:
    # The owner last wrote by SMS (answered): that is where the notice goes.
    ask = await h.append(Message(text="hi"), conversation_id="c-spend", span_id=None, channel="sms", role="user")
    await h.append(Message(text="hello"), conversation_id="c-spend", span_id=None, channel="sms", role="assistant",
                   parent_id=ask.id)
    # The module's System began a period when it started: the burst and two SIGKILLs fit in it.
    burst = [ScriptSignal(source=f"burst-{n}", payload=ScriptPayload(text=f"look at {n}")) for n in range(10)]
    for s in burst:
        await h.bus.publish(topics.INNER_SIGNAL, s)
    answered: set[str] = set()

    async def first_answered() -> list[str]:
        return await play_the_agent(h, answered)

    await eventually(first_answered, "the first activation")

    async def all_held() -> bool:
        settled = 0
        for s in burst:
            kinds = [(d.payload["decision"], d.payload["reason"]) for d in await decisions(h, s.id)]
            if ("hold", "budget_usd") in kinds or any(k == "act" for k, _ in kinds):
                settled += 1
        return settled == len(burst)

    await eventually(all_held, "the other nine held with budget_usd")
    acts = await activations(h)
    assert len(acts) == 1, "only the first activation ran"
    held = [s for s in burst if s.id not in acts[0].signal_ids]
    assert len(held) == 9
    for s in held:
        assert [d.payload["reason"] for d in await decisions(h, s.id)] == ["budget_usd"]

    async def told() -> list[Event]:
        return await h.events(kinds=["budget.notice"])

    notices = await eventually(told, "the owner's budget notice")
    sms = await eventually(lambda: outbox_sms(h), "the notice's SMS")
    assert len(sms) == 1 and "budget reached" in sms[0].text and "$0.01" in sms[0].text
    assert notices[0].payload["outbox_id"] == sms[0].id and notices[0].payload["channel"] == "sms"
    line = await budget(running)
    assert line.background_held and line.held_reason == "budget_usd" and line.daily.limit_usd == 0.012
    assert line.monthly.limit_usd is None and line.monthly.left_usd is None and line.timezone == "UTC"
    assert line.daily.spent_usd == pytest.approx(TURN_COST) and line.daily.left_usd == pytest.approx(0.002)

    # SIGKILL the ledger, then the inner plane with its state file lost: spend is rebuilt, not reset.
    began = time.monotonic()
    running.kill("ledger")
    running.start("ledger")
    # The new plane's period is the same one (its start, its key), cut to end soon after this:
    # the plane's start and the checks of what it rebuilt (a few requests) fit in what is left.
    cut, period_end = period_cut_to(running.extra_env, room_for_a_start(time.monotonic() - began))
    restart_plane(running, keep_state=False, **cut)
    after = await budget(running)
    assert after.daily.spent_usd == pytest.approx(TURN_COST) and after.background_held
    assert len(await activations(h)) == 1
    assert len(await outbox_sms(h)) == 1 and len(await h.events(kinds=["budget.notice"])) == 1
    assert time.time() < period_end, "the test ran past its period: too slow to show the hold"

    # The next period: the held signals run again (one activation, then the line holds again).
    async def next_act() -> list[str]:
        return await play_the_agent(h, answered)

    await eventually(next_act, "an activation in the next period", period_end - time.time() + 30)
    second = (await activations(h))[1]
    lead = await decisions(h, second.signal_ids[0])
    act = next(d for d in lead if d.payload["decision"] == "act")
    assert "held before: budget_usd" in act.payload["detail"]
    assert datetime.fromtimestamp(period_end, UTC) <= act.ts

    async def told_again() -> list[Event] | None:
        found = await h.events(kinds=["budget.notice"])
        return found if len(found) == 2 else None

    notices = await eventually(told_again, "one notice for the new period")
    assert notices[0].payload["period"] != notices[1].payload["period"]
    assert len(await outbox_sms(h)) == 2

    # Raising the line lets the rest run.
    restart_plane(running, BUDGET_DAILY_USD="100")

    async def all_ran() -> bool:
        await play_the_agent(h, answered)
        ran = {i for a in await activations(h) for i in a.signal_ids}
        return ran >= {s.id for s in burst}

    await eventually(all_ran, "every held signal to run once the budget is raised", 90.0)
    assert len(await outbox_sms(h)) == 2


async def test_the_runaway_guard_trips_on_a_loop_of_activations_and_tells_the_owner_once(
    running: System, h: Harness
) -> None:
    # No money line now: only the guard, at 5 background calls a minute (each activation makes 3).
    restart_plane(running, BUDGET_DAILY_USD="", BUDGET_BACKGROUND_CALLS_PER_MIN="5")
    before = {a.id for a in await activations(h)}
    # The previous test may have left its last activation unanswered (resent by the new process).
    answered = {e.parent_id or "" for e in await h.events(kinds=["activation.outcome"])}
    loop = [ScriptSignal(source=f"loop-{n}", payload=ScriptPayload(text=f"again {n}")) for n in range(8)]
    for s in loop:
        await h.bus.publish(topics.INNER_SIGNAL, s)

    async def tripped() -> list[Event] | None:
        await play_the_agent(h, answered, cost=0.0003, calls=3)
        found = [d for s in loop for d in await decisions(h, s.id) if d.payload["reason"] == "runaway"]
        return found or None

    held = await eventually(tripped, "the runaway guard to hold the loop", 60.0)
    assert "background model calls within a minute (the guard allows 5)" in held[0].payload["detail"]
    ran = [a for a in await activations(h) if a.id not in before]
    # The previous test's calls of the last minute count too: it may trip on the first activation.
    assert len(ran) <= 2, "the guard let the loop run on"

    async def notice() -> list[Event] | None:
        found = [e for e in await h.events(kinds=["budget.notice"]) if e.payload["reason"] == "runaway"]
        return found or None

    told = await eventually(notice, "the owner told of the runaway")
    assert len(told) == 1 and told[0].payload["channel"] == "sms"
    assert sum("runaway guard tripped" in m.text for m in await outbox_sms(h)) == 1
    line = await budget(running)
    assert line.background_held and line.held_reason == "runaway" and line.daily.limit_usd is None
    # Nothing more runs while the guard holds, however long the loop keeps signalling.
    await h.processed((await h.events(kinds=["inner.decision"]))[-1].seq or 0)
    assert [a for a in await activations(h) if a.id not in before] == ran


async def test_memory_extraction_waits_at_its_cap_and_runs_once_the_cap_is_raised(
    running: System, h: Harness, standin: StandinProcess
) -> None:
    # The owner's calendar day, no money line, the guard's pause over: only extraction's own cap.
    restart_plane(running, BUDGET_DAILY_USD="", BUDGET_PERIOD_S="0", BUDGET_RUNAWAY_PAUSE_S="1",
                  BUDGET_EXTRACTION_DAILY_USD="0.001")
    await h.append(ModelUsage(model="gpt-5.5", purpose="memory_extraction", input_tokens=5000, cost_usd=0.002),
                   conversation_id=None, span_id=None, channel="inner")
    ask = await h.append(Message(text="my sister Ana lives in Porto"), conversation_id="c-mem", span_id="s-mem",
                         channel="text", role="user")
    said = await h.append(Message(text="noted"), conversation_id="c-mem", span_id="s-mem", channel="text",
                          role="assistant", parent_id=ask.id)
    cp = await h.append(Checkpoint(after_seq=(ask.seq or 1) - 1, through_seq=said.seq or 0),
                        conversation_id="c-mem", span_id="s-mem", channel="inner")
    await h.processed(cp.seq or 0)
    await eventually(lambda: plane_logged(running, f"memory extraction of checkpoint {cp.id} waits"),
                     "the extraction held")
    state = json.loads((running.runtime / "inner-plane" / "state.json").read_text())
    assert [c["id"] for c in state["checkpoints"]] == [cp.id], "the checkpoint is kept while extraction waits"
    async def pause_over() -> BudgetReply | None:
        line = await budget(running)
        return None if line.held_reason == "runaway" else line

    # The extraction's usage above is one more background call within a minute of the test
    # before's loop: the guard trips again, for its 1 s pause. Each wait since may take less (a
    # full run met it still holding once the plane's restart became a fork): wait for its end.
    line = await eventually(pause_over, "the runaway guard's pause over")
    assert not line.background_held  # activations may run: only extraction is at its cap
    assert model_requests(standin, MEMORY_MARK) == []
    assert [e for e in await h.events(kinds=["memory.extracted"]) if e.parent_id == cp.id] == []

    restart_plane(running, BUDGET_DAILY_USD="", BUDGET_PERIOD_S="0", BUDGET_RUNAWAY_PAUSE_S="1",
                  BUDGET_EXTRACTION_DAILY_USD="100")

    async def extracted() -> list[Event]:
        return [e for e in await h.events(kinds=["memory.extracted"]) if e.parent_id == cp.id]

    assert len(await eventually(extracted, "the deferred extraction")) == 1
    assert len(model_requests(standin, MEMORY_MARK)) == 1


async def test_a_capsule_refresh_waits_at_its_cap_and_runs_once_the_cap_is_raised(
    running: System, h: Harness, standin: StandinProcess
) -> None:
    # Only the capsule's own cap, already spent today: a crossing of the capsule line asks for a
    # refresh, which waits (kept in the state, no model call) and runs once after the cap is raised.
    caps = {"BUDGET_DAILY_USD": "", "BUDGET_PERIOD_S": "0", "BUDGET_RUNAWAY_PAUSE_S": "1"}
    restart_with(running, BASE | caps, BUDGET_CAPSULE_DAILY_USD="0.001")
    await h.append(ModelUsage(model="gpt-5.5", purpose="capsule", input_tokens=5000, cost_usd=0.002),
                   conversation_id=None, span_id=None, channel="inner")
    ask = await h.append(Message(text="I moved to Lisbon"), conversation_id="c-cap", span_id="s-cap",
                         channel="text", role="user")
    await h.append(Message(text="noted"), conversation_id="c-cap", span_id="s-cap", channel="text",
                   role="assistant", parent_id=ask.id)
    # plane_env's lines: COMPACT_THRESHOLD 1000 x CAPSULE_THRESHOLD 0.5, crossed at 500 input tokens.
    crossing = await h.append(ContextUsage(input_tokens=800, compact_threshold=1000), conversation_id="c-cap",
                              span_id="s-cap", channel="text")
    await h.processed(crossing.seq or 0)
    await eventually(lambda: plane_logged(running, "capsule refresh (threshold) waits"), "the refresh held")
    state = json.loads((running.runtime / "inner-plane" / "state.json").read_text())
    assert state["capsule_request"]["trigger_seq"] == crossing.seq, "the request is kept while the refresh waits"
    assert model_requests(standin, CAPSULE_MARK) == []
    assert await h.events(conversation_id="c-cap", kinds=["context.capsule"]) == []

    restart_with(running, BASE | caps, BUDGET_CAPSULE_DAILY_USD="100")

    async def refreshed() -> list[Event]:
        return await h.events(conversation_id="c-cap", kinds=["context.capsule"])

    [capsule] = await eventually(refreshed, "the deferred capsule refresh")
    assert capsule.payload["through_seq"] >= (crossing.seq or 0)
    assert len(model_requests(standin, CAPSULE_MARK)) == 1


async def test_owner_turns_past_the_line_tell_the_owner_once_by_email(running: System, h: Harness) -> None:
    # The owner's own turns pass the day's line (they still run: no hard stop). The owner last
    # wrote by email, so that is where they are told, once for the period, with the figures.
    # Short periods again (the tests before switched to the calendar day, whose spend is past
    # this line already): the line is reached in a period of its own that begins now, after the
    # owner wrote; its key is its own, so the burst test's notices belong to other periods.
    running.extra_env.update(period_from_now(PERIOD_S))
    restart_plane(running, BUDGET_DAILY_USD="0.05", BUDGET_RUNAWAY_PAUSE_S="1")
    ask = await h.append(Message(text="Can you check my week?"), conversation_id="c-mail", span_id=None,
                         channel="email", role="user")
    await h.append(Message(text="Here it is."), conversation_id="c-mail", span_id=None, channel="email",
                   role="assistant", parent_id=ask.id)
    for _ in range(3):
        await h.append(ModelUsage(model="gpt-5.5", purpose="owner_turn", cause_id=ask.id, input_tokens=4000,
                                  output_tokens=400, cost_usd=0.03), conversation_id="c-mail", span_id=None,
                       channel="email")

    async def told() -> list[Event] | None:
        found = [e for e in await h.events(kinds=["budget.notice"]) if e.payload["channel"] == "email"]
        return found or None

    [notice] = await eventually(told, "the owner told by email")
    assert notice.payload["reason"] == "budget_usd" and notice.payload["spent_day_usd"] >= 0.05
    emails = [OutboundEmail.model_validate_json(m.data) for m in await h.stream_messages("CHANNELS")
              if m.subject == topics.EMAIL_OUT.subject]
    assert [e.id for e in emails] == [notice.payload["outbox_id"]]
    assert "budget reached" in emails[0].text and "of $0.05" in emails[0].text
    assert "Your own messages still get answers." in emails[0].text
    # Told once: later turns in the same period add spend, not another notice.
    await h.append(ModelUsage(model="gpt-5.5", purpose="owner_turn", cause_id=ask.id, input_tokens=4000,
                              output_tokens=400, cost_usd=0.03), conversation_id="c-mail", span_id=None,
                   channel="email")
    await h.processed((await h.events(kinds=["model.usage"]))[-1].seq or 0)
    assert len([e for e in await h.events(kinds=["budget.notice"]) if e.payload["channel"] == "email"]) == 1
