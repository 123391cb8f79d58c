"""SMS and email turns are answered in their channel: the reply goes to the outbox (CHANNELS).

Real ledger and agent processes and the OpenAI stand-in; the probe publishes the inputs the
gateway (SMS) and the pollers (email) would, and reads CHANNELS as the pollers would. No
pollers run: what is checked is what the agent queues, with which ids and fields.
"""

from collections.abc import Awaitable, Callable
from typing import TypedDict

import pytest
from nats.js.api import ConsumerConfig, DeliverPolicy

from delegate.contracts import streams, subjects, topics
from delegate.contracts.channels import OUTBOUND_ADAPTER, OutboundEmail, OutboundSms
from delegate.contracts.events import Channel, ConversationOpened, Message, SpanOpened, make_event
from delegate.contracts.messages import RegenerateInput, UserInput
from tests.agent.rig import Probe, response_bodies
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

OWNER_SMS = {
    "TWILIO_ACCOUNT_SID": "AC" + "1" * 32, "TWILIO_AUTH_TOKEN": "twilio-test-token",
    "TWILIO_PHONE_NUMBER": "+15550002222", "OWNER_PHONE": "+15550001111",
}


class Place(TypedDict):
    """Where a seeded event goes (make_event's keywords the events share)."""

    conversation_id: str
    span_id: str
    channel: Channel


async def outbound(probe: Probe) -> list[OutboundSms | OutboundEmail]:
    """Everything on the outbox, in stream order."""
    info = await probe.bus.js.stream_info("CHANNELS")
    found: list[OutboundSms | OutboundEmail] = []
    if not info.state.messages:
        return found
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await probe.bus.js.get_msg("CHANNELS", seq)
        if raw.subject in (subjects.CHANNELS_SMS_OUT, subjects.CHANNELS_EMAIL_OUT):
            assert raw.data is not None
            found.append(OUTBOUND_ADAPTER.validate_json(raw.data))
    return found


async def queued(probe: Probe, outbox_id: str, timeout: float = 20.0) -> OutboundSms | OutboundEmail:
    async def matching() -> list[OutboundSms | OutboundEmail]:
        return [m for m in await outbound(probe) if m.id == outbox_id]

    match = await eventually(matching, f"{outbox_id} queued", timeout)
    assert len(match) == 1, match
    return match[0]


async def all_acked(probe: Probe, delivered: int, timeout: float = 30.0) -> None:
    """Wait until the agent acked every input: whatever it publishes for them is out by then."""
    async def acked() -> bool:
        info = await probe.bus.js.consumer_info("AGENT", streams.AGENT_WORKER)
        seen = info.delivered.consumer_seq if info.delivered else 0
        return (seen or 0) >= delivered and info.num_ack_pending == 0 and info.num_pending == 0

    await eventually(acked, f"the agent to ack its {delivered} inputs", timeout)


def sms_input(text: str, sid: str) -> UserInput:
    """As the gateway publishes an inbound SMS."""
    return UserInput(
        channel="sms", text=text, client_msg_id=f"sms:{sid}",
        meta={"from": "+15550001111", "message_sid": sid, "media": []},
    )


def email_input(text: str, subject: str, message_id: str, references: list[str]) -> UserInput:
    """As the pollers publish an inbound email."""
    return UserInput(
        channel="email", text=text, client_msg_id=f"email:{message_id[:20]}",
        meta={"from": "owner@example.test", "subject": subject, "message_id": message_id,
              "in_reply_to": references[-1] if references else None, "references": references,
              "attachments": [], "auth": "dmarc=pass"},
    )


async def test_an_sms_turn_is_answered_by_sms_and_a_chat_turn_is_not(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "Yes, 3pm works. See you then."},
        {"action": "text", "text": "Hello in the chat."},
    )
    sms = sms_input("Can we meet at 3?", "SM" + "1" * 32)
    await probe.publish_input(sms)
    answer = await probe.answer(sms.id)
    assert answer.kind == "message" and answer.channel == "sms"

    reply = await queued(probe, answer.id)
    assert isinstance(reply, OutboundSms)
    assert (reply.text, reply.origin, reply.parent_id) == ("Yes, 3pm works. See you then.", "reply", answer.id)
    assert (reply.conversation_id, reply.span_id) == (answer.conversation_id, answer.span_id)

    chat = await probe.send("hi from the browser")
    chat_answer = await probe.answer(chat.id)
    assert chat_answer.kind == "message" and chat_answer.channel == "text"
    await all_acked(probe, delivered=2)
    assert [m.id for m in await outbound(probe)] == [answer.id]  # the chat answer stays in the chat

    sms_body, chat_body = response_bodies(standin)
    # Each turn's instructions carry that turn's channel and its rules.
    assert "reaching you by SMS" in sms_body["instructions"] and "no Markdown" in sms_body["instructions"]
    assert "reaching you by text chat" in chat_body["instructions"]
    assert "no Markdown" not in chat_body["instructions"]


async def test_an_email_turn_is_answered_on_its_thread(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "Saturday suits me.\n\nBest"},
        {"action": "text", "text": "Noted, Sunday then."},
    )
    first = email_input("Are you free this weekend?", "Weekend plans", "<a1@mail.example>", [])
    await probe.publish_input(first)
    answer = await probe.answer(first.id)
    mail = await queued(probe, answer.id)
    assert isinstance(mail, OutboundEmail)
    assert (mail.subject, mail.text, mail.origin) == ("Re: Weekend plans", "Saturday suits me.\n\nBest", "reply")
    assert (mail.in_reply_to, mail.references, mail.parent_id) == (
        "<a1@mail.example>",
        ["<a1@mail.example>"],
        answer.id,
    )
    assert "email reply" in response_bodies(standin)[0]["instructions"]

    # A reply on the thread: its subject is not doubled, the references grow.
    second = email_input(
        "Actually, Sunday.", "RE: Weekend plans", "<a3@mail.example>", ["<a1@mail.example>", "<r2@delegate.example>"]
    )
    await probe.publish_input(second)
    again = await probe.answer(second.id)
    threaded = await queued(probe, again.id)
    assert isinstance(threaded, OutboundEmail)
    assert threaded.subject == "RE: Weekend plans"
    assert threaded.in_reply_to == "<a3@mail.example>"
    assert threaded.references == ["<a1@mail.example>", "<r2@delegate.example>", "<a3@mail.example>"]


async def test_a_failed_sms_turn_says_sorry_by_sms(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script({"action": "error", "status": 500, "times": 2})
    sms = sms_input("What is on today?", "SM" + "2" * 32)
    await probe.publish_input(sms)
    failed = await probe.answer(sms.id)
    assert failed.kind == "turn.failed"
    notice = await queued(probe, failed.id)
    assert isinstance(notice, OutboundSms) and notice.parent_id == failed.id
    assert notice.text.startswith("Sorry, I could not answer that.")
    assert failed.payload["message"] in notice.text


async def test_a_redelivered_answered_input_sends_its_reply_once(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(AGENT_ACK_WAIT="2").start("ledger")
    probe: Probe = await probe_for(system)

    # Play a leader that answered two inputs and died before acking them: the sms answer's
    # outbound was never published, the email answer's was.
    sms = sms_input("Remind me of the plumber", "SM" + "3" * 32)
    mail = email_input("And the invoice?", "Invoice", "<inv@mail.example>", [])
    await probe.publish_input(sms)
    await probe.publish_input(mail)
    config = ConsumerConfig(
        durable_name=streams.AGENT_WORKER,
        ack_wait=2.0,
        max_deliver=30,
        deliver_policy=DeliverPolicy.ALL,
        filter_subject=subjects.AGENT_INPUT,
        max_ack_pending=1000,
    )
    psub = await probe.bus.js.pull_subscribe(
        subjects.AGENT_INPUT, durable=streams.AGENT_WORKER, stream="AGENT", config=config
    )
    taken = await psub.fetch(2, timeout=5)
    assert [topics.AGENT_INPUT.decode(m.data).id for m in taken] == [sms.id, mail.id]
    conversation, span = "conv-dead-leader", "span-dead-leader"
    await probe.append(make_event(ConversationOpened(), conversation_id=conversation, span_id=None, channel="sms"))
    await probe.append(
        make_event(SpanOpened(type="interaction"), conversation_id=conversation, span_id=span, channel="sms")
    )
    answers = {}
    for msg, text in ((sms, "The plumber comes at 9."), (mail, "The invoice is paid.")):
        common: Place = {"conversation_id": conversation, "span_id": span, "channel": msg.channel}
        await probe.append(
            make_event(Message(text=msg.text, meta=msg.meta), role="user", id=msg.id, ts=msg.ts, **common)
        )
        answer = make_event(
            Message(text=text, response_id=f"resp_{msg.channel}"), role="assistant", parent_id=msg.id, **common
        )
        await probe.append(answer)
        answers[msg.channel] = answer
    published = OutboundEmail(
        id=answers["email"].id,
        subject="Re: Invoice",
        text="The invoice is paid.",
        in_reply_to="<inv@mail.example>",
        references=["<inv@mail.example>"],
        parent_id=answers["email"].id,
    )
    await probe.bus.publish(topics.EMAIL_OUT, published, msg_id=published.id)
    await psub.unsubscribe()

    # The new leader gets both again, answers neither again, and publishes both replies: the
    # missing one is delivered, the other is deduplicated by its id.
    system.start_one("agent")
    system.wait_ready(["agent"])
    await all_acked(probe, delivered=4)
    found = await outbound(probe)
    assert sorted(m.id for m in found) == sorted([answers["sms"].id, answers["email"].id])
    [sms_reply] = [m for m in found if isinstance(m, OutboundSms)]
    assert (sms_reply.text, sms_reply.parent_id) == ("The plumber comes at 9.", answers["sms"].id)
    assert not response_bodies(standin)  # nothing reached the model: both were answered
    ledger = await probe.ledger_events()
    assert len([e for e in ledger if e.parent_id in (sms.id, mail.id)]) == 2


async def test_send_sms_to_owner_uses_the_outbox(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(OWNER_DELIVERY_WAIT_S="1", **OWNER_SMS).start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {
            "action": "tool_call",
            "name": "send_sms_to_owner",
            "arguments": {"text": "Leaving now"},
            "call_id": "call_owner_sms_1",
        },
        {"action": "text", "text": "I texted you.", "match": {"has_tool_output": True}},
    )
    chat = await probe.send("Text me when you leave")
    answer = await probe.answer(chat.id)
    assert answer.payload["text"] == "I texted you."
    sent = await queued(probe, "call_owner_sms_1")
    [call] = [e for e in probe.of_kind("tool.call") if e.payload["call_id"] == "call_owner_sms_1"]
    assert isinstance(sent, OutboundSms)
    assert (sent.text, sent.origin, sent.parent_id) == ("Leaving now", "tool", call.id)
    assert sent.conversation_id == answer.conversation_id
    [result] = [e for e in probe.of_kind("tool.result") if e.payload["call_id"] == "call_owner_sms_1"]
    # No pollers run here: the tool says it is queued, not that it was sent.
    assert result.payload["ok"] is True and result.payload["output"].startswith("queued")
    await all_acked(probe, delivered=1)
    assert [m.id for m in await outbound(probe)] == ["call_owner_sms_1"]  # the chat answer itself is not sent


async def test_a_regenerated_sms_answer_is_sent_as_a_new_sms(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    standin.script(
        {"action": "text", "text": "First try."},
        {"action": "text", "text": "Second, better try."},
    )
    sms = sms_input("Any news?", "SM" + "5" * 32)
    await probe.publish_input(sms)
    first = await probe.answer(sms.id)
    await queued(probe, first.id)

    regenerate = RegenerateInput(turn_id=sms.id)
    await probe.publish_input(regenerate)
    await probe.wait_for(lambda: any(e.id == regenerate.id for e in probe.events), "the regenerated answer")
    again = await queued(probe, regenerate.id)  # the new answer's id is the input's
    assert isinstance(again, OutboundSms)
    assert (again.text, again.parent_id) == ("Second, better try.", regenerate.id)
    await all_acked(probe, delivered=2)
    assert [m.id for m in await outbound(probe)] == [first.id, regenerate.id]
