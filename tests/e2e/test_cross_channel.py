"""One relationship across channels: a fact told by SMS is known in the next chat turn.

Real processes (ledger, agent, gateway, the OpenAI stand-in). The SMS enters as the gateway
publishes an inbound SMS (a UserInput on the agent's input stream); the chat turns go over
the browser WebSocket. What the model was given is read from the stand-in's recorded requests.
"""

from collections.abc import Awaitable, Callable

import nats.js.errors
import pytest

from delegate.contracts import subjects
from delegate.contracts.channels import OUTBOUND_ADAPTER, OutboundSms
from delegate.contracts.messages import UserInput
from tests.agent.chat import ChatClient, api
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe, input_texts, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

FACT = "My locker code at the gym is 4471."


async def sms_reply(probe: Probe, outbox_id: str, timeout: float = 20.0) -> OutboundSms:
    async def queued() -> OutboundSms | None:
        try:
            raw = await probe.bus.js.get_last_msg("CHANNELS", subjects.CHANNELS_SMS_OUT)
        except nats.js.errors.NotFoundError:  # nothing on the subject yet
            return None
        msg = OUTBOUND_ADAPTER.validate_json(raw.data) if raw.data else None
        return msg if isinstance(msg, OutboundSms) and msg.id == outbox_id else None

    return await eventually(queued, "the SMS turn's reply queued", timeout)


async def test_a_fact_sent_by_sms_is_in_the_next_chat_turns_context(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway")
    probe: Probe = await probe_for(system)
    chat = await ChatClient.open(system)
    try:
        standin.script(
            {"action": "text", "text": "Got it, 4471."},
            {"action": "text", "text": "Your locker code is 4471."},
            {"action": "text", "text": "It is 4471."},
        )
        sid = "SM" + "4" * 32
        sms = UserInput(
            channel="sms",
            text=FACT,
            client_msg_id=f"sms:{sid}",
            meta={"from": "+15550001111", "message_sid": sid, "media": []},
        )
        await probe.publish_input(sms)
        sms_answer = await probe.answer(sms.id)
        assert sms_answer.kind == "message" and sms_answer.channel == "sms"
        assert (await sms_reply(probe, sms_answer.id)).text == "Got it, 4471."

        # The chat turn continues the chain whose last request carried the SMS itself.
        asked = await chat.send("What is my locker code?")
        answer = await chat.answer(asked)
        assert answer["kind"] == "message" and answer["channel"] == "text"
        sms_body, chat_body = response_bodies(standin)
        assert any(FACT in text for text in input_texts(sms_body))
        assert chat_body["previous_response_id"] == sms_answer.payload["response_id"]
        assert input_texts(chat_body) == ["What is my locker code?"]
        assert "reaching you by text chat" in chat_body["instructions"]

        # Without a chain to continue (End conversation), the fact still comes along: the fresh
        # working context replays recent turns of every channel, the SMS marked as such.
        async with api(system) as http:
            (await http.post("/api/conversation/end")).raise_for_status()
        again = await chat.send("Remind me of the locker code")
        assert (await chat.answer(again))["kind"] == "message"
        fresh = response_bodies(standin)[-1]
        assert "previous_response_id" not in fresh
        replayed = [t for t in input_texts(fresh) if FACT in t]
        assert replayed and replayed[0].startswith("[SMS ·")
    finally:
        await chat.close()
