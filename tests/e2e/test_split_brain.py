"""Split brain: the leading agent is paused (SIGSTOP) mid-stream past its lease, then resumed.

The standby takes over and answers; the old leader, resumed, still believes for a moment that
it leads. Its late events carry its old fencing token, so the ledger refuses them (dead letters
with a "fenced" reason, the positive proof that they were sent and stopped); none reaches the
timeline, no turn is answered twice, and every message sent before, during and after is
answered exactly once.
"""

import os
import signal
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from delegate.contracts import subjects
from delegate.contracts.events import Event
from delegate.contracts.messages import DeadLetter
from delegate.runtime.lease import LEASE_KEY
from tests.agent.chat import ChatClient
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, term_rows
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STANDBY_ANSWER = "Answered by the standby while the old leader was frozen."


def signal_agent(system: System, name: str, sig: signal.Signals) -> None:
    proc = system.procs[name].proc
    assert proc is not None and proc.poll() is None
    os.kill(proc.pid, sig)


async def test_a_paused_leader_never_writes_after_its_successor_took_over(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway", separate=("agent",))
    system.start_one("agent", instance="agent-b")  # hot standby: waits for the lease
    probe: Probe = await probe_for(system)
    letters: list[DeadLetter] = []

    async def on_letter(msg: Any) -> None:
        letters.append(DeadLetter.model_validate_json(msg.data))

    await probe.bus.nc.subscribe(subjects.DEAD_ALL, cb=on_letter)
    chat = await ChatClient.open(system)
    frozen = False
    try:
        warm = await chat.send("Hello before the freeze")
        assert (await chat.answer(warm))["kind"] == "message"
        kv = await probe.bus.js.key_value(subjects.AGENT_LEASE_BUCKET)

        # The old leader's stream outlasts the freeze by far: resumed, it still has text to send.
        standin.script(
            {"action": "slow", "delay_ms": 150, "text": "The frozen leader streams this slowly. " * 12},
            {"action": "text", "text": STANDBY_ANSWER},
            {"action": "text", "text": "Answered during the freeze."},
            {"action": "text", "text": "Answered after the thaw."},
        )
        turn = await chat.send("Tell me something long", client_msg_id="split-1")
        await chat.wait_for(lambda: len(chat.deltas(turn)) >= 3, "the answer to start streaming")
        signal_agent(system, "agent", signal.SIGSTOP)
        frozen = True

        # Longer than the ttl: the standby takes the lease (a higher fencing token) and answers.
        answer = await chat.answer(turn, timeout=60)
        assert answer["kind"] == "message" and answer["payload"]["text"] == STANDBY_ANSWER
        assert "agent-b" in (await probe.bus.ping("agent")).instance
        during = await chat.send("Are you there while it is frozen?")
        assert (await chat.answer(during, timeout=60))["payload"]["text"] == "Answered during the freeze."
        frozen_deltas = len([d for d in chat.deltas(turn) if d["attempt"] == 1])
        new_token = (await kv.get(LEASE_KEY)).revision or 0

        signal_agent(system, "agent", signal.SIGCONT)
        frozen = False

        # The resumed leader publishes with its old token at least once (its term.ended, and
        # whatever of the turn it still finishes); the ledger refuses each one as fenced.
        def fenced() -> list[Event]:
            found = [Event.model_validate_json(d.data) for d in letters if d.reason.startswith("fenced")]
            return found if any(e.kind == "term.ended" for e in found) else []

        late = await probe.wait_for(fenced, "the deposed leader's term.ended to be refused as fenced", timeout=60)
        assert all(e.fence is not None and e.fence.singleton == "agent" for e in late)
        assert all(e.fence is not None and e.fence.token < new_token for e in late)
        await probe.wait_for(
            lambda: "stepped down" in system.procs["agent"].log_text(), "the old leader to step down"
        )

        # A message after the thaw (also the sentinel: the gateway relayed everything before it).
        after = await chat.send("And after it woke up?")
        assert (await chat.answer(after, timeout=60))["payload"]["text"] == "Answered after the thaw."
        # Resumed, the old leader streamed nothing more: its lease was in doubt at once.
        assert len([d for d in chat.deltas(turn) if d["attempt"] == 1]) == frozen_deltas
        assert chat.streamed_text(turn) == STANDBY_ANSWER

        # The timeline: every user message once, each answered exactly once, none of the late
        # events stored (the user message the old leader sent again is the successor's copy).
        ledger = await probe.ledger_events()
        by_id = {e.id: e for e in ledger}
        for user in (warm, turn, during, after):
            assert [e.id for e in ledger if e.id == user] == [user]
            answers = [e for e in ledger if e.parent_id == user and e.kind in ("message", "turn.failed")]
            assert len(answers) == 1 and answers[0].kind == "message", (user, answers)
        assert not [e for e in late if e.id in by_id and e.id not in (turn, during, after)]
        assert len([e for e in ledger if e.kind == "conversation.opened"]) == 1

        # The frozen leader's term was closed by its successor, not by itself.
        rows = term_rows(system)
        assert [r["holder"] for r in rows] == ["agent", "agent-b"]
        assert rows[0]["end_reason"] == "superseded" and rows[1]["ended_at"] is None
        assert rows[1]["supersedes"] == rows[0]["id"]
        assert "agent-b" in (await probe.bus.ping("agent")).instance
    finally:
        if frozen:
            signal_agent(system, "agent", signal.SIGCONT)  # never leave a stopped process behind
        await chat.close()

