"""BUDGET_HARD_STOP_OWNER: over the day's line, the owner's message is refused with a clear
``turn.failed`` (code ``budget``) and no model call; without the hard stop it is answered. A
call the owner starts is refused the same way, before any Realtime session opens.

Real gateway, ledger, agent, inner plane (the spend projection) and the OpenAI stand-in. The
day's spend comes from a committed ``model.usage`` the test writes (an expensive earlier turn).
"""

import asyncio
import json
import re
from collections.abc import Iterator

import pytest
import websockets

from delegate.contracts import topics
from delegate.contracts.events import Event, ModelUsage, make_event
from delegate.contracts.messages import QueryRequest
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System, module_system, owner_http, probe_bus
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
            module_standin: StandinProcess) -> Iterator[System]:
    env = {"OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": module_standin.base_url,
           "BUDGET_DAILY_USD": "0.5", "BUDGET_HARD_STOP_OWNER": "true"}
    with module_system(tmp_path_factory.mktemp("hard-stop"), request, "ledger", "agent", "inner-plane", "voice",
                       "gateway", env=env, separate=("agent",)) as system:
        yield system


async def answer_to(running: System, text: str) -> Event:
    """Send ``text`` as the owner; the committed answer (assistant message or turn.failed)."""
    async with owner_http(running, timeout=30) as http:
        sent = await http.post("/api/messages", json={"text": text})
        assert sent.status_code == 202, sent.text
    async with probe_bus(running) as bus:
        async def answered() -> Event | None:
            page = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["message", "turn.failed"]))
            asked = next((e for e in page.events if e.kind == "message" and e.payload.get("text") == text), None)
            if asked is None:
                return None
            return next((e for e in page.events if e.parent_id == asked.id
                         and (e.kind == "turn.failed" or (e.kind == "message" and e.role == "assistant"))), None)

        return await eventually(answered, f"the answer to {text!r}", 60.0)


async def spend_over_the_line(running: System) -> None:
    """An expensive earlier turn, committed; back once the inner plane counts it."""
    async with probe_bus(running) as bus:
        spent = make_event(ModelUsage(model="gpt-5.5", purpose="owner_turn", input_tokens=10**6, cost_usd=0.75),
                           conversation_id=None, span_id=None, channel="text")
        await bus.publish(topics.ledger_append("test"), spent)
    async with owner_http(running, timeout=30) as http:
        async def over() -> bool:
            body = (await http.get("/api/usage/budget")).json()
            return bool(body["daily"]["spent_usd"] >= 0.5)

        await eventually(over, "the inner plane to count the spend")


async def test_over_the_line_a_call_the_owner_starts_is_refused_saying_why(
        running: System, module_standin: StandinProcess) -> None:
    module_standin.reset()
    module_standin.realtime_reset()
    await spend_over_the_line(running)
    frames = []
    async with websockets.connect(f"{running.ws}/browser-call?token={running.token}") as ws:
        with pytest.raises(websockets.ConnectionClosed) as closed:
            while True:
                frames.append(json.loads(await asyncio.wait_for(ws.recv(), 30)))
    [refusal] = [f for f in frames if f["type"] == "error"]
    assert refusal["code"] == "budget", frames
    assert "of $0.50" in refusal["message"] and "BUDGET_HARD_STOP_OWNER" in refusal["message"], refusal
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4402
    assert module_standin.realtime_sessions() == [], "a Realtime session was opened for a refused call"


async def test_over_the_line_the_owners_turn_is_refused_saying_why(
        running: System, module_standin: StandinProcess) -> None:
    module_standin.reset()
    await spend_over_the_line(running)

    refused = await answer_to(running, "What is on today?")
    assert refused.kind == "turn.failed" and refused.payload["code"] == "budget"
    assert re.search(r"\$\d+\.\d\d of \$0\.50", refused.payload["message"]), refused.payload["message"]
    assert "BUDGET_HARD_STOP_OWNER" in refused.payload["message"]
    assert module_standin.response_requests() == [], "the model was called for a refused turn"

    running.extra_env["BUDGET_HARD_STOP_OWNER"] = "false"
    running.kill("agent")
    running.start("agent")
    answered = await answer_to(running, "And tomorrow?")
    assert answered.kind == "message" and answered.role == "assistant", answered
