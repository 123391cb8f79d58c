"""OpenAI failing (429, 500, a dropped stream): the browser sees a clear turn.failed, then carries on."""

from collections.abc import Callable

import pytest

from tests.agent.chat import ChatClient
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


FAILURES = [
    ({"action": "error", "status": 429, "times": 2, "retry_after_ms": 10}, "rate_limited"),
    ({"action": "error", "status": 500, "times": 2}, "model_unavailable"),
    ({"action": "drop_stream", "after_deltas": 2, "text": "half an answer, then nothing", "times": 2},
     "stream_dropped"),
]


async def test_a_failed_turn_is_shown_and_the_next_one_works(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    # OPENAI_MAX_RETRIES=1: each scripted failure is served twice (the SDK's try and its retry,
    # or the agent's one retry of a broken stream), so the turn really fails.
    system = make_system(OPENAI_MAX_RETRIES="1").start("ledger", "agent", "gateway")
    chat = await ChatClient.open(system)
    try:
        good = await chat.answer(await chat.send("hello"))
        for step, code in FAILURES:
            standin.script(step)
            turn = await chat.send(f"this one will fail with {code}")
            failed = await chat.answer(turn)
            assert failed["kind"] == "turn.failed" and failed["parent_id"] == turn
            assert failed["payload"]["code"] == code
            assert failed["payload"]["message"]  # something a person can read
            nxt = await chat.send(f"and after {code}?")
            answer = await chat.answer(nxt)
            assert answer["kind"] == "message"
            assert response_bodies(standin)[-1]["previous_response_id"] == good["payload"]["response_id"]
            good = answer
        user_ids = [e["id"] for e in chat.events("message") if e["role"] == "user"]
        assert len(user_ids) == len(set(user_ids)) == 1 + 2 * len(FAILURES)
    finally:
        await chat.close()
