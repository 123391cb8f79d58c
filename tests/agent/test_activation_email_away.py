"""EMAIL_WHEN_AWAY=signal: an email while the owner is away is recorded and raised as a signal.

Real nats-server, ledger and agent processes and the OpenAI stand-in; the probe publishes the
email input as the pollers would and reads the INNER stream as the inner plane would. No
inner plane runs: what is checked is what the agent records and raises, and that it does not
answer by itself.
"""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from delegate.contracts import subjects, topics
from delegate.contracts.channels import OutboundEmail
from delegate.contracts.events import Event
from delegate.contracts.signals import SIGNAL_ADAPTER, AnySignal, EmailReceived
from tests.agent.activations import dump_if_failed, settled
from tests.agent.rig import Probe, agent_env
from tests.agent.test_channel_replies import email_input, outbound, queued
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]


@dataclass
class Away:
    system: System
    standin: StandinProcess


@pytest.fixture(scope="module")
def away(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Away]:
    root = tmp_path_factory.mktemp("email-away")
    standin = StandinProcess(log_dir=root / "standin").start()
    system = System(root, env=agent_env(standin, EMAIL_WHEN_AWAY="signal"))
    failed = request.session.testsfailed
    try:
        system.start("ledger", "agent")
        yield Away(system, standin)
    finally:
        dump_if_failed(request, failed, system, standin)
        system.stop()
        standin.stop()


@pytest.fixture
async def probe(away: Away) -> AsyncIterator[Probe]:
    assert away.system.nats is not None
    opened = await Probe.open(away.system.nats.url)
    yield opened
    await opened.close()


async def inner_signals(probe: Probe) -> list[AnySignal]:
    """Every signal on the INNER stream, in stream order."""
    info = await probe.bus.js.stream_info("INNER")
    found: list[AnySignal] = []
    if not info.state.messages:
        return found
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        raw = await probe.bus.js.get_msg("INNER", seq)
        if raw.subject == subjects.INNER_SIGNAL:
            assert raw.data is not None
            found.append(SIGNAL_ADAPTER.validate_json(raw.data))
    return found


async def test_an_email_while_away_becomes_a_user_message_and_one_signal_and_no_reply(away: Away, probe: Probe) -> None:
    standin = away.standin
    before = (len(standin.response_requests()), len(await outbound(probe)),
              len(await probe.ledger_events(kinds=["span.opened"])))
    mail = email_input("Can you look at the offer from Ana?", "Offer", "<away-1@mail.example>", [])
    await probe.publish_input(mail)
    # The same input again under another Nats-Msg-Id: what a redelivery after a crash looks like.
    await probe.bus.publish(topics.AGENT_INPUT, mail, msg_id=f"{mail.id}-again")
    await settled(probe)

    async def stored() -> list[Event]:
        # The agent acks its input once the event is in the LEDGER stream; the ledger commits it
        # a moment later (its writer process may still be starting on a fresh ledger).
        return [e for e in await probe.ledger_events(kinds=["message"]) if e.id == mail.id]

    [message] = await eventually(stored, "the email stored in the ledger")
    assert (message.role, message.channel, message.span_id) == ("user", "email", None)
    assert message.payload["meta"]["subject"] == "Offer"
    [signal] = [s for s in await eventually(lambda: inner_signals(probe), "the email.received signal")
                if s.kind == "email.received" and s.payload.event_id == mail.id]
    assert isinstance(signal, EmailReceived)
    assert signal.id == f"{mail.id}:signal" and signal.source == "email"
    assert signal.payload.event_id == mail.id and signal.payload.sender == "owner@example.test"
    assert (signal.payload.subject, signal.payload.preview) == ("Offer", "Can you look at the offer from Ana?")

    # No immediate reply: no answer, no model request, nothing queued for sending, no span opened.
    assert [e for e in await probe.ledger_events() if e.parent_id == mail.id] == []
    after = (len(standin.response_requests()), len(await outbound(probe)),
             len(await probe.ledger_events(kinds=["span.opened"])))
    assert after == before


async def test_an_email_during_a_conversation_is_answered_at_once(away: Away, probe: Probe) -> None:
    standin = away.standin
    signals_before = len(await inner_signals(probe))
    standin.script(
        {"action": "text", "text": "Here is the plan.", "match": {"input_contains": "send me the plan"}},
        {"action": "text", "text": "Got your email.", "match": {"input_contains": "the attachment"}},
    )
    chat = await probe.send("Please send me the plan by email")  # an open chat span: the owner is here
    await probe.answer(chat.id)
    mail = email_input("Here is the attachment.", "Plan", "<here-1@mail.example>", [])
    await probe.publish_input(mail)
    answer = await probe.answer(mail.id)
    assert answer.kind == "message" and answer.payload["text"] == "Got your email."
    reply = await queued(probe, answer.id)
    assert isinstance(reply, OutboundEmail) and reply.in_reply_to == "<here-1@mail.example>"
    await settled(probe)
    assert len(await inner_signals(probe)) == signals_before
