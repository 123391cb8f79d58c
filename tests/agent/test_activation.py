"""Activations: the span, the Context Composer, saying nothing, and where the answer goes.

One system for the module: real nats-server, ledger, agent and pollers processes, the OpenAI
stand-in, the Twilio REST stand-in and an SMTP server, so an answer routed to SMS or email is
checked where it arrives. The tests publish the ActivationInput the inner plane would; each
sets up the owner's last channel itself (a chat, an SMS), so their order does not matter.
"""

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from email.message import EmailMessage

import pytest

from delegate.contracts.channels import OutboundSms
from tests.agent.activations import activation, activation_events, dump_if_failed, reminder, settled, text_items
from tests.agent.rig import Probe, agent_env
from tests.agent.test_channel_replies import outbound, sms_input
from tests.pollers.outbox_fixtures import SmtpCapture
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

OWNER_PHONE = "+15550001111"
OWNER_EMAIL = "owner@example.com"


@dataclass
class Services:
    system: System
    standin: StandinProcess
    twilio: TwilioStandin
    smtp: SmtpCapture


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Services]:
    root = tmp_path_factory.mktemp("activation")
    standin = StandinProcess(log_dir=root / "standin").start()
    twilio = TwilioStandin().start()
    smtp = SmtpCapture().start()
    env = agent_env(
        standin,
        OWNER_TIMEZONE="Europe/Berlin",
        OWNER_EMAIL=OWNER_EMAIL,
        SMTP_HOST="127.0.0.1", SMTP_PORT=str(smtp.port), SMTP_TLS="none", SMTP_FROM="delegate@mail.example.test",
        PUBLIC_BASE_URL="https://delegate.example.test",
        OUTBOX_BACKOFF_S="0.05", OUTBOX_BACKOFF_MAX_S="0.2",
        **twilio.env(owner_phone=OWNER_PHONE),
    )
    system = System(root, env=env)
    failed = request.session.testsfailed
    try:
        system.start("ledger", "agent", "pollers", separate=("agent",))
        yield Services(system, standin, twilio, smtp)
    finally:
        dump_if_failed(request, failed, system, standin)
        system.stop()
        smtp.stop()
        twilio.stop()
        standin.stop()


@pytest.fixture
async def probe(services: Services) -> AsyncIterator[Probe]:
    assert services.system.nats is not None
    opened = await Probe.open(services.system.nats.url)
    yield opened
    await opened.close()


async def test_an_activation_span_carries_the_batch_the_answer_and_the_outcome(
    services: Services, probe: Probe
) -> None:
    standin = services.standin
    chat = await probe.send("What is on my list today?")
    await probe.answer(chat.id)
    await probe.end()  # the activation then starts a fresh working context: the chat is replayed as a user turn

    act = activation(reminder("Call the dentist about the crown", late_by_s=180))
    said = "Time to call the dentist about your crown."
    standin.script({"action": "text", "text": said, "match": {"input_contains": "dentist about the crown"}})
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)

    opened = events[0]
    assert (opened.kind, opened.channel) == ("span.opened", "inner")
    assert opened.payload == {"type": "activation", "activation_id": act.id, "signals": act.signals}
    [message] = [e for e in events if e.kind == "message"]
    assert (message.role, message.channel, message.parent_id) == ("assistant", "inner", act.id)
    assert message.payload["text"] == said
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    assert outcome.payload["status"] == "completed" and outcome.payload["summary"] == said
    assert "reply_channel" not in outcome.payload  # the owner's last channel was the chat: the timeline only
    assert "timeline" in outcome.payload["reason"]
    assert (message.seq or 0) < (outcome.seq or 0)
    closed = await eventually(
        lambda: probe.ledger_events(span_id=opened.span_id, kinds=["span.closed"]), "the activation span to close"
    )
    assert closed[0].payload["reason"] == "completed" and (closed[0].seq or 0) > (outcome.seq or 0)

    # What the model got: the signal as developer context, rendered, never as a user's words.
    bodies = [r["body"] for r in standin.response_requests()]
    [body] = [b for b in bodies if "dentist about the crown" in json.dumps(b)]
    items = text_items(body)
    assert any(role == "user" and "What is on my list today?" in text for role, text in items)
    assert [role for role, text in items if "dentist about the crown" in text] == ["developer"]
    [composed] = [text for role, text in items if role == "developer"]
    assert "Reminder: Call the dentist about the crown" in composed
    assert "09:00 (Europe/Berlin)" in composed and "late by 3 min" in composed
    assert "nothing_to_do" in composed
    assert "nothing_to_do" in {t["name"] for t in body["tools"]}
    # ...and only an activation may say nothing: the chat turn was not offered the tool.
    chat_body = next(b for b in bodies if "What is on my list today?" in json.dumps(b["input"]))
    assert "nothing_to_do" not in {t.get("name") for t in chat_body.get("tools") or []}


async def test_nothing_to_do_is_an_outcome_and_nothing_is_delivered(services: Services, probe: Probe) -> None:
    twilio, standin = services.twilio, services.standin
    sms = sms_input("I am off to the gym tonight", "SM" + "7" * 32)
    await probe.publish_input(sms)
    answer = await probe.answer(sms.id)
    await eventually(lambda: answer.payload["text"] in twilio.bodies(to=OWNER_PHONE), "the SMS reply at Twilio")
    sent_before = len(twilio.messages)

    act = activation(reminder("Pack the gym bag"))
    why = "They said they are off to the gym already."
    standin.script(
        {
            "action": "tool_call",
            "name": "nothing_to_do",
            "arguments": {"reason": why},
            "match": {"input_contains": "Pack the gym bag"},
        },
        {"action": "text", "text": "Noted.", "match": {"has_tool_output": True, "input_contains": "nothing will be"}},
    )
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    assert outcome.payload["status"] == "nothing_to_do" and outcome.payload["reason"] == why
    assert "reply_channel" not in outcome.payload
    assert not [e for e in events if e.kind in ("message", "turn.failed")]  # no message, and not an error
    [call] = [e for e in events if e.kind == "tool.call"]
    [result] = [e for e in events if e.kind == "tool.result"]
    assert call.payload["name"] == "nothing_to_do" and result.payload["ok"] is True

    await settled(probe)
    assert not [m for m in await outbound(probe) if m.span_id == outcome.span_id]
    assert len(twilio.messages) == sent_before
    assert probe.turn_deltas(act.id) == []  # nor was the text after the decision shown live


async def test_the_answer_goes_by_sms_when_the_owner_texted_last(services: Services, probe: Probe) -> None:
    twilio, standin = services.twilio, services.standin
    sms = sms_input("Nudge me about my plants later", "SM" + "8" * 32)
    await probe.publish_input(sms)
    await probe.answer(sms.id)

    act = activation(reminder("Water the ficus"))
    said = "Your ficus is thirsty: time to water it."
    standin.script({"action": "text", "text": said, "match": {"input_contains": "Water the ficus"}})
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    [message] = [e for e in events if e.kind == "message"]
    assert outcome.payload["status"] == "completed" and outcome.payload["reply_channel"] == "sms"

    await eventually(lambda: said in twilio.bodies(to=OWNER_PHONE), "the activation's SMS at Twilio")
    assert twilio.bodies(to=OWNER_PHONE).count(said) == 1
    [queued] = [m for m in await outbound(probe) if m.id == message.id]
    assert isinstance(queued, OutboundSms) and (queued.origin, queued.parent_id) == ("activation", message.id)


async def test_reply_via_email_sends_the_answer_by_email(services: Services, probe: Probe) -> None:
    smtp, standin = services.smtp, services.standin
    act = activation(reminder("Renew the passport", reply_via="email"), reply_via="email")
    said = "Your passport expires next month: renew it this week."
    standin.script({"action": "text", "text": said, "match": {"input_contains": "Renew the passport"}})
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    assert outcome.payload["reply_channel"] == "email"
    assert "asked for email" in outcome.payload["reason"]

    mails = await eventually(
        lambda: [m.message for m in smtp.messages if said in _plain(m.message)],
        "the activation's email at the SMTP server",
    )
    [mail] = mails
    assert mail["To"] == OWNER_EMAIL and mail["Subject"] == "Reminder: Renew the passport"


def _plain(mail: EmailMessage) -> str:
    body = mail.get_body(preferencelist=("plain",))
    return str(body.get_content()) if body is not None else ""


async def test_a_failed_activation_still_brings_the_reminder(services: Services, probe: Probe) -> None:
    twilio, standin = services.twilio, services.standin
    act = activation(reminder("Feed the neighbour's cat", reply_via="sms"), reply_via="sms")
    standin.script({"action": "error", "status": 500, "times": 4, "match": {"input_contains": "neighbour's cat"}})
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)
    [failed] = [e for e in events if e.kind == "turn.failed"]
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    assert (outcome.payload["status"], outcome.payload["reply_channel"]) == ("failed", "sms")
    assert failed.payload["message"] in outcome.payload["reason"]

    # The model was down, but the reminder itself still reaches the owner, once.
    bodies = await eventually(
        lambda: [b for b in twilio.bodies(to=OWNER_PHONE) if "Reminder: Feed the neighbour's cat" in b],
        "the reminder's SMS at Twilio",
    )
    assert len(bodies) == 1 and bodies[0].startswith("Sorry, I could not answer that.")


async def test_an_agent_killed_mid_activation_delivers_the_answer_once_after_restart(
    services: Services, probe: Probe
) -> None:
    system, twilio, standin = services.system, services.twilio, services.standin
    sms = sms_input("Text me when the parcel is due", "SM" + "9" * 32)
    await probe.publish_input(sms)
    await probe.answer(sms.id)

    act = activation(reminder("The parcel from Lisbon arrives"))
    said = "Your parcel from Lisbon arrives today."
    standin.script(
        {"action": "stall", "match": {"input_contains": "parcel from Lisbon"}},  # the first leader hangs here...
        {"action": "text", "text": said, "match": {"input_contains": "parcel from Lisbon"}},  # ...its successor answers
    )
    await probe.publish_input(act)

    def asked() -> int:
        return len([r for r in standin.response_requests() if "parcel from Lisbon" in json.dumps(r["body"])])

    await eventually(asked, "the activation's model request")
    system.kill("agent")  # SIGKILL mid-activation: span opened, nothing answered
    system.procs["agent"].start()
    events = await activation_events(probe, act.id)
    await settled(probe)

    assert asked() == 2
    opened = [e for e in events if e.kind == "span.opened"]
    assert len(opened) == 1 and opened[0].payload["activation_id"] == act.id  # the same span, continued
    assert [e.payload["text"] for e in events if e.kind == "message"] == [said]
    assert [e.payload["reply_channel"] for e in events if e.kind == "activation.outcome"] == ["sms"]
    await eventually(lambda: said in twilio.bodies(to=OWNER_PHONE), "the activation's SMS at Twilio")
    assert twilio.bodies(to=OWNER_PHONE).count(said) == 1
