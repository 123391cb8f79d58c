"""The agent's leadership terms in the ledger: real ledger and agent processes, SIGTERM and SIGKILL."""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from delegate.contracts import subjects, topics
from delegate.contracts.messages import ResumeRequest, ResumeState
from delegate.runtime.lease import LEASE_KEY
from tests.agent.rig import Probe, term_rows
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]


async def resume(probe: Probe) -> ResumeState:
    return await probe.bus.request(topics.LEDGER_RESUME, ResumeRequest(turn_limit=0))


async def until_rows(
    probe: Probe, system: System, check: Any, what: str, timeout: float = 30.0
) -> list[dict[str, Any]]:
    result: list[list[dict[str, Any]]] = []

    def met() -> bool:
        rows = term_rows(system)
        if check(rows):
            result.append(rows)
            return True
        return False

    await probe.wait_for(met, what, timeout)
    return result[0]


def stop(system: System, name: str) -> int | None:
    return system.procs[name].stop(20)


async def test_a_term_opens_with_the_lease_and_closes_on_sigterm(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]]
) -> None:
    system = make_system().start("ledger", "agent", separate=("agent",))
    probe: Probe = await probe_for(system)
    [opened] = await until_rows(probe, system, lambda rows: len(rows) == 1, "the agent's term row")
    assert opened["holder"] == "agent" and opened["ended_at"] is None and opened["supersedes"] is None
    state = await resume(probe)
    assert state.agent_term is not None
    assert (state.agent_term.id, state.agent_term.holder) == (opened["id"], "agent")
    assert state.agent_term.started_seq == opened["started_seq"]

    # It still answers as before, and a turn adds no term.
    msg = await probe.send("hello")
    assert (await probe.answer(msg.id)).kind == "message"
    assert len(term_rows(system)) == 1

    assert await asyncio.to_thread(stop, system, "agent") == 0
    [closed] = await until_rows(probe, system, lambda rows: rows[0]["ended_at"] is not None, "the term to end")
    assert closed["end_reason"] == "shutdown" and closed["id"] == opened["id"]
    assert (await resume(probe)).agent_term is None
    events = await probe.ledger_events(kinds=["term.started", "term.ended"])
    assert [(e.kind, e.payload["term_id"]) for e in events] == [
        ("term.started", opened["id"]),
        ("term.ended", opened["id"]),
    ]
    assert all(e.conversation_id is None and e.span_id is None and e.channel == "inner" for e in events)

    # Started again with no standby around: a clean predecessor is not superseded.
    system.procs["agent"].start()
    rows = await until_rows(probe, system, lambda rows: len(rows) == 2, "the second term")
    assert rows[1]["supersedes"] is None and rows[1]["ended_at"] is None
    assert rows[0]["end_reason"] == "shutdown"


async def test_a_standby_supersedes_a_killed_holder(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]]
) -> None:
    system = make_system().start("ledger", "agent", separate=("agent",))
    system.start_one("agent", instance="agent-b")  # hot standby: waits for the lease
    probe: Probe = await probe_for(system)
    [first] = await until_rows(probe, system, lambda rows: len(rows) == 1, "the leader's term")
    assert first["holder"] == "agent"
    # The standby tries for the lease every half second; two renewals by the leader after it
    # stood by are the positive marker that it tried (and failed) meanwhile, recording nothing.
    await probe.wait_for(
        lambda: "standing by for the lease" in system.procs["agent-b"].log_text(), "the standby to stand by"
    )
    kv = await probe.bus.js.key_value(subjects.AGENT_LEASE_BUCKET)
    seen = (await kv.get(LEASE_KEY)).revision or 0

    async def renewed_twice() -> bool:
        return ((await kv.get(LEASE_KEY)).revision or 0) >= seen + 2

    await eventually(renewed_twice, "two renewals by the leader")
    assert len(term_rows(system)) == 1
    assert "agent-b" not in (await probe.bus.ping("agent")).instance

    system.kill("agent")  # SIGKILL: no term.ended
    rows = await until_rows(probe, system, lambda rows: len(rows) == 2, "the standby's term", timeout=40)
    old, new = rows
    assert new["holder"] == "agent-b" and new["supersedes"] == first["id"] and new["ended_at"] is None
    assert old["id"] == first["id"] and old["end_reason"] == "superseded"
    assert old["ended_at"] == new["started_at"]  # closed by the start that superseded it
    state = await resume(probe)
    assert state.agent_term is not None and state.agent_term.id == new["id"]
    assert state.agent_term.supersedes == first["id"]

    msg = await probe.send("are you there?")
    assert (await probe.answer(msg.id)).kind == "message"

    assert await asyncio.to_thread(stop, system, "agent-b") == 0
    rows = await until_rows(probe, system, lambda rows: rows[1]["ended_at"] is not None, "the standby's end")
    assert [r["end_reason"] for r in rows] == ["superseded", "shutdown"]
    assert (await resume(probe)).agent_term is None
