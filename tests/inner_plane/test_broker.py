"""The attention broker as real processes: nats-server, ledger, agent and inner plane, the OpenAI stand-in.

One system for the module (each test raises its own signals and reads only their decisions);
a test that needs other broker settings restarts the inner plane with them. The tests run in
file order: the budget test first, while the ledger holds no wakes yet.
"""

import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import ActivationInput, DeadLetter, UserInput
from delegate.contracts.signals import ScriptPayload, ScriptSignal
from delegate.contracts.streams import INNER_BROKER
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system
from tests.support.waiting import eventually

from .harness import Harness, plane_env
from .harness import restart_plane as restart_with

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Settings every test starts from; a test overrides what it is about.
BASE = {
    "OWNER_TIMEZONE": "UTC",
    "QUIET_HOURS": "",
    "INNER_DAILY_BUDGET": "1000",
    "INNER_MIN_WAKE_GAP_S": "0",
    "INNER_COALESCE_S": "0.3",
    "INNER_DEDUP_WINDOW_S": "600",
    "IDLE_SPAN_SECONDS": "600",
}


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, module_standin: StandinProcess, request: pytest.FixtureRequest
) -> Iterator[System]:
    with module_system(
        tmp_path_factory.mktemp("broker"), request, "ledger", "agent", "inner-plane",
        env={**plane_env(module_standin), **BASE}, separate=("inner-plane",),
    ) as system:
        yield system


@pytest.fixture
async def h(running: System) -> AsyncIterator[Harness]:
    harness = await Harness.connect(running)
    yield harness
    await harness.close()


def restart_plane(system: System, *, keep_state: bool = True, **env: str) -> None:
    """A new inner-plane process with ``env`` on top of BASE (SIGKILL: nothing is saved on the way out)."""
    restart_with(system, BASE, keep_state=keep_state, **env)


def signal(text: str, source: str = "test", **fields: Any) -> ScriptSignal:
    return ScriptSignal(source=source, payload=ScriptPayload(text=text), **fields)


async def raise_signals(h: Harness, *signals: ScriptSignal) -> None:
    for s in signals:
        await h.bus.publish(topics.INNER_SIGNAL, s)


async def decisions_of(h: Harness, signal_id: str) -> list[Event]:
    return [e for e in await h.events(kinds=["inner.decision"]) if e.parent_id == signal_id]


async def decided(h: Harness, signal_id: str, decision: str, timeout: float = 30.0) -> Event:
    async def found() -> Event | None:
        return next((e for e in await decisions_of(h, signal_id) if e.payload["decision"] == decision), None)

    return await eventually(found, f"a {decision} decision on signal {signal_id}", timeout)


async def activations(h: Harness) -> list[ActivationInput]:
    return [m for m in await h.agent_inputs() if m.type == "activation"]


async def outcome_of(h: Harness, activation_id: str) -> Event:
    async def found() -> Event | None:
        return next((e for e in await h.events(kinds=["activation.outcome"]) if e.parent_id == activation_id), None)

    return await eventually(found, f"the outcome of activation {activation_id}", 60.0)


def held(system: System, signal_id: str) -> dict[str, Any] | None:
    """The broker's durable view of a signal (its state file)."""
    state = json.loads((system.runtime / "inner-plane" / "state.json").read_text())
    pending: dict[str, Any] = state["broker"]["pending"].get(signal_id) or {}
    return pending.get("hold")


def hhmmss(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%H:%M:%S")


async def test_the_budget_holds_the_n_plus_first_proactive_activation(running: System, h: Harness) -> None:
    restart_plane(running, INNER_DAILY_BUDGET="2")
    first, second, third = (signal(f"proactive {n}", source=f"budget-{n}") for n in range(3))
    await raise_signals(h, first, second, third)
    for s in (first, second):
        act = await decided(h, s.id, "act")
        await outcome_of(h, act.payload["activation_id"])
    hold = await decided(h, third.id, "hold")
    assert hold.payload["reason"] == "budget"
    assert "2 of 2 proactive activations used today" in hold.payload["detail"]
    tomorrow = (utcnow() + timedelta(days=1)).date()
    assert hold.payload["until"] == f"{tomorrow.isoformat()}T00:00:00Z"
    # An urgent signal bypasses the spent budget.
    urgent = signal("the disk is full", source="budget-urgent", urgency="urgent")
    await raise_signals(h, urgent)
    act = await decided(h, urgent.id, "act")
    assert act.payload["reason"] == "urgent"
    await outcome_of(h, act.payload["activation_id"])
    assert [d.payload["decision"] for d in await decisions_of(h, third.id)] == ["hold"]
    restart_plane(running)  # the next tests spend from a budget of BASE's size


async def test_bad_signals_are_dead_lettered_with_their_reason(running: System, h: Harness) -> None:
    marker = new_id()
    bad = {
        "unknown kind": {"id": f"{marker}-a", "kind": "horoscope", "source": "x", "payload": {}},
        "bad payload": {"id": f"{marker}-b", "kind": "script", "source": "x", "payload": {"text": ""}},
    }
    for body in bad.values():
        raw = json.dumps(body).encode()
        await h.bus.js.publish(topics.INNER_SIGNAL.subject, raw, headers={"Nats-Msg-Id": str(body["id"])})

    async def letters() -> list[DeadLetter] | None:
        info = await h.bus.js.stream_info("DEAD")
        found: list[DeadLetter] = []
        if not info.state.messages:
            return None
        for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
            msg = await h.bus.js.get_msg("DEAD", seq)
            assert msg.data is not None
            letter = DeadLetter.model_validate_json(msg.data)
            if marker in letter.data:
                found.append(letter)
        return found if len(found) == 2 else None

    found = {json.loads(letter.data)["id"]: letter for letter in await eventually(letters, "two dead letters")}
    unknown, invalid = found[f"{marker}-a"], found[f"{marker}-b"]
    for letter in (unknown, invalid):
        assert letter.consumer == INNER_BROKER and letter.subject == topics.INNER_SIGNAL.subject
        assert letter.reason.startswith("undecodable")
    assert "horoscope" in unknown.reason or "tag" in unknown.reason
    assert "text" in invalid.reason
    assert not [e for e in await h.events(kinds=["inner.signal"]) if e.id.startswith(marker)]


async def test_duplicate_and_expired_signals_are_dropped_with_the_decision_recorded(
    running: System, h: Harness
) -> None:
    key = f"backup-{new_id()}"
    first = signal("the nightly backup failed", dedup_key=key)
    again = signal("the nightly backup failed (again)", dedup_key=key)
    stale = signal("the train leaves now", expires_at=utcnow() - timedelta(seconds=1))
    await raise_signals(h, first, again, stale)
    dup = await decided(h, again.id, "drop")
    assert dup.payload["reason"] == "duplicate" and first.id in dup.payload["detail"]
    expired = await decided(h, stale.id, "drop")
    assert expired.payload["reason"] == "expired"
    for drop, s in ((dup, again), (expired, stale)):
        assert (drop.channel, drop.span_id, drop.parent_id) == ("inner", None, s.id)
    act = await decided(h, first.id, "act")
    assert act.payload["signal_ids"] == [first.id]
    await outcome_of(h, act.payload["activation_id"])
    sent = [a for a in await activations(h) if first.id in a.signal_ids]
    assert len(sent) == 1 and {again.id, stale.id}.isdisjoint(sent[0].signal_ids)


async def test_a_burst_of_five_related_signals_becomes_one_activation(running: System, h: Harness) -> None:
    restart_plane(running, INNER_COALESCE_S="2")
    burst = [signal(f"new mail {n}", source="mail-burst") for n in range(5)]
    await raise_signals(h, *burst)
    act = await decided(h, burst[0].id, "act")
    ids = [s.id for s in burst]
    assert act.payload["signal_ids"] == ids
    for s in burst[1:]:
        joined = await decided(h, s.id, "coalesce")
        assert joined.payload["activation_id"] == act.payload["activation_id"]
    outcome = await outcome_of(h, act.payload["activation_id"])
    assert outcome.payload["status"] in ("completed", "nothing_to_do")
    [sent] = [a for a in await activations(h) if set(a.signal_ids) & set(ids)]
    assert sent.id == act.payload["activation_id"] and sent.signal_ids == ids
    assert [s["payload"]["text"] for s in sent.signals] == [s.payload.text for s in burst]
    assert sent.reply_via is None and sent.urgent is False
    outcomes = [e for e in await h.events(kinds=["activation.outcome"]) if e.parent_id == sent.id]
    assert len(outcomes) == 1


async def test_quiet_hours_hold_a_calm_signal_until_their_end_while_an_urgent_one_acts(
    running: System, h: Harness
) -> None:
    now = utcnow()
    end = (now + timedelta(seconds=8)).replace(microsecond=0)
    restart_plane(running, QUIET_HOURS=f"{hhmmss(now - timedelta(hours=1))}-{hhmmss(end)}")
    calm = signal("the plants want water", source="quiet-calm")
    urgent = signal("smoke alarm", source="quiet-urgent", urgency="urgent")
    await raise_signals(h, calm, urgent)
    hold = await decided(h, calm.id, "hold")
    assert hold.payload["reason"] == "quiet_hours"
    assert hold.payload["until"] == end.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert hold.payload["detail"] == f"quiet hours until {end:%H:%M} UTC"
    act = await decided(h, urgent.id, "act")
    assert act.ts < end, "the urgent signal waited for the quiet hours"
    released = await decided(h, calm.id, "act", timeout=40.0)
    assert released.ts >= end
    assert [d.payload["decision"] for d in await decisions_of(h, calm.id)] == ["hold", "act"]


async def test_an_activation_that_arrives_mid_turn_waits_for_the_turn_to_end(
    running: System, module_standin: StandinProcess, h: Harness
) -> None:
    marker = f"slow question {new_id()}"
    module_standin.script(
        {"action": "stall", "seconds": 4, "text": "A slow answer.", "match": {"input_contains": marker}}
    )
    question = UserInput(text=marker)
    await h.bus.publish(topics.AGENT_INPUT, question)
    asked = await h.committed(question.id)
    urgent = signal("the package arrived", source="mid-turn", urgency="urgent")
    await raise_signals(h, urgent)
    hold = await decided(h, urgent.id, "hold")
    assert hold.payload["reason"] == "owner_mid_turn" and "until" not in hold.payload
    assert question.id in hold.payload["detail"]

    async def answer() -> Event | None:
        found = await h.events(kinds=["message", "turn.failed"], conversation_id=asked.conversation_id)
        return next((e for e in found if e.parent_id == question.id), None)

    answered = await eventually(answer, "the slow answer", 60.0)
    act = await decided(h, urgent.id, "act")
    assert answered.seq is not None and act.seq is not None and act.seq > answered.seq
    assert [d.payload["decision"] for d in await decisions_of(h, urgent.id)] == ["hold", "act"]
    await outcome_of(h, act.payload["activation_id"])


async def test_a_restarted_broker_holds_the_same_decisions(running: System, h: Harness) -> None:
    now = utcnow()
    restart_plane(running, QUIET_HOURS=f"{hhmmss(now - timedelta(minutes=5))}-{hhmmss(now + timedelta(hours=1))}")
    calm = signal("weekly report is ready", source="restart-calm")
    await raise_signals(h, calm)
    hold = await decided(h, calm.id, "hold")
    await h.processed(hold.seq or 0)
    until = held(running, calm.id)
    assert until is not None and until["reason"] == "quiet_hours"

    for keep_state in (True, False):  # SIGKILLed; then SIGKILLed and its state file lost as well
        restart_plane(running, keep_state=keep_state, QUIET_HOURS=running.extra_env["QUIET_HOURS"])
        # A barrier: the restarted worker has planned (the held signal with it) once this acts.
        barrier = signal("urgent barrier", source=f"restart-barrier-{keep_state}", urgency="urgent")
        await raise_signals(h, barrier)
        act = await decided(h, barrier.id, "act")
        await h.processed(act.seq or 0)
        assert held(running, calm.id) == until
        assert [d.id for d in await decisions_of(h, calm.id)] == [hold.id], "a decision was made again"
        await outcome_of(h, act.payload["activation_id"])
