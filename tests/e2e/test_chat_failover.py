"""The agent SIGKILLed mid-stream: the standby takes over; nothing lost, nothing doubled."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from tests.agent.chat import ChatClient
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_standby_takes_over_a_turn_killed_mid_stream(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway", separate=("agent",))
    system.start_one("agent", instance="agent-b")  # hot standby: waits for the lease
    probe: Probe = await probe_for(system)
    chat = await ChatClient.open(system)
    try:
        warm = await chat.send("Hello before the crash")
        chain = (await chat.answer(warm))["payload"]["response_id"]

        slow_text = "This answer streams slowly, word by word, until the agent dies. " * 4
        standin.script(
            {"action": "slow", "delay_ms": 150, "text": slow_text},
            {"action": "text", "text": "Answered by the standby after the crash."},
        )
        turn = await chat.send("Tell me something long", client_msg_id="crash-1")
        await chat.wait_for(lambda: len(chat.deltas(turn)) >= 3, "the answer to start streaming")
        system.kill("agent")  # SIGKILL, mid-stream

        answer = await chat.answer(turn, timeout=60)
        assert answer["kind"] == "message"
        assert answer["payload"]["text"] == "Answered by the standby after the crash."
        # Clients were told to drop the dead attempt: the rerun streams under a new attempt number.
        attempts = sorted({d["attempt"] for d in chat.deltas(turn)})
        assert len(attempts) == 2 and attempts[0] == 1
        assert chat.streamed_text(turn) == answer["payload"]["text"]

        # The rerun continued from the same chain head as the killed request.
        bodies = response_bodies(standin)
        assert bodies[-1]["previous_response_id"] == bodies[-2]["previous_response_id"] == chain

        after = await chat.send("Are you still there?")
        assert (await chat.answer(after))["kind"] == "message"
        assert response_bodies(standin)[-1]["previous_response_id"] == answer["payload"]["response_id"]

        # In the ledger: the user message once, answered once; one conversation, one open span.
        ledger = await probe.ledger_events()
        assert [e.id for e in ledger if e.id == turn] == [turn]
        assert len([e for e in ledger if e.parent_id == turn and e.kind in ("message", "turn.failed")]) == 1
        assert len({e.conversation_id for e in ledger if not e.kind.startswith("term.")}) == 1
        # Each lease holder recorded its term; the killed one was closed by its successor.
        starts = [e for e in ledger if e.kind == "term.started"]
        assert [e.payload["holder"] for e in starts] == ["agent", "agent-b"]
        assert starts[1].payload["supersedes"] == starts[0].payload["term_id"]
        assert not [e for e in ledger if e.kind == "term.ended"]
        assert len([e for e in ledger if e.kind == "span.opened"]) == 1
        assert len([e for e in ledger if e.kind == "conversation.opened"]) == 1
        pong = await probe.bus.ping("agent")
        assert pong.ready and "agent-b" in pong.instance

        # A graceful stop mid-turn releases the lease and hands the input back at once.
        system.procs["agent"].start()  # the crashed one comes back, as the standby now
        await chat.wait_for(
            lambda: "standing by for the lease" in system.procs["agent"].log_text(), "the new standby to start"
        )
        standin.script(
            {"action": "slow", "delay_ms": 300, "text": "An answer far too slow to finish before shutdown. " * 8},
            {"action": "text", "text": "Finished by the other agent."},
        )
        turn = await chat.send("One more long one, please")
        await chat.wait_for(lambda: len(chat.deltas(turn)) >= 2, "the slow answer to start")
        stopping = asyncio.create_task(asyncio.to_thread(system.procs["agent-b"].stop, 20))
        answer = await chat.answer(turn, timeout=60)
        assert await stopping == 0  # it drained and exited cleanly (SIGTERM, no SIGKILL needed)
        assert answer["payload"]["text"] == "Finished by the other agent."
        assert chat.streamed_text(turn) == answer["payload"]["text"]
        pong = await probe.bus.ping("agent")
        assert "agent-b" not in pong.instance
    finally:
        await chat.close()
