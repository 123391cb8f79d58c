"""The outbox killed mid-send (SIGKILL, a real process) and restarted: an SMS is verified with
Twilio and recorded sent without a second message; an email, which SMTP cannot verify, is
recorded unknown and not sent again."""

import pytest

from delegate.contracts import streams
from delegate.contracts.channels import OutboundEmail, OutboundSms
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401

pytestmark = pytest.mark.integration


async def _runner_consuming(outbox: OutboxRig, durable: str) -> None:
    async def exists() -> bool:
        return await outbox.consumer_exists(durable)

    await outbox.until(f"consumer {durable}", exists)


async def test_an_sms_interrupted_by_a_crash_is_verified_not_sent_twice(outbox: OutboxRig) -> None:
    first = outbox.start_runner()
    await _runner_consuming(outbox, streams.POLLERS_SMS)
    outbox.twilio.delay_next(60.0, store=True)  # Twilio has it; the answer never reaches the sender
    sms = OutboundSms(text="Meeting moved to 3pm.", parent_id="answer-7")
    await outbox.send(sms)

    async def held() -> bool:
        return len(outbox.twilio.creates()) == 1 and "sending" in await outbox.statuses(sms.id)

    await outbox.until("the send to be under way", held)
    first.kill()

    outbox.start_runner()
    sent = await outbox.outcome(sms.id, timeout=30)

    (message,) = outbox.twilio.messages
    assert len(outbox.twilio.creates()) == 1
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]
    assert await outbox.statuses(sms.id) == ["sending", "sending", "sent"]


async def test_an_sms_whose_request_never_reached_twilio_is_sent_after_the_restart(outbox: OutboxRig) -> None:
    first = outbox.start_runner()
    await _runner_consuming(outbox, streams.POLLERS_SMS)
    outbox.twilio.delay_next(60.0, store=False)  # held before Twilio stored anything
    sms = OutboundSms(text="Call the plumber back.", parent_id="answer-8")
    await outbox.send(sms)

    async def held() -> bool:
        return len(outbox.twilio.creates()) == 1 and "sending" in await outbox.statuses(sms.id)

    await outbox.until("the send to be under way", held)
    first.kill()

    outbox.start_runner()
    sent = await outbox.outcome(sms.id, timeout=30)

    (message,) = outbox.twilio.messages
    assert message["body"] == sms.text
    assert sent.payload["external_ids"] == [message["sid"]]
    assert len(outbox.twilio.creates()) == 2


async def test_an_email_interrupted_by_a_crash_is_recorded_unknown_and_not_resent(outbox: OutboxRig) -> None:
    first = outbox.start_runner()
    await _runner_consuming(outbox, streams.POLLERS_EMAIL)
    outbox.smtp.hold_data(60.0)
    mail = OutboundEmail(subject="Re: Plans", text="Saturday works.", parent_id="answer-9")
    await outbox.send(mail)

    async def in_data() -> bool:
        return outbox.smtp.data_started.is_set() and "sending" in await outbox.statuses(mail.id)

    await outbox.until("the SMTP transaction to be under way", in_data)
    first.kill()

    outbox.start_runner()
    unknown = await outbox.outcome(mail.id, timeout=30)

    assert unknown.id == f"{mail.id}:unknown"
    assert unknown.payload["status"] == "unknown" and unknown.payload["final"] is True
    assert "not sent again" in unknown.payload["error"]
    assert await outbox.statuses(mail.id) == ["sending", "unknown"]
    (arrived,) = outbox.smtp.messages  # the interrupted one: it arrived, and only once
    assert arrived.message["Subject"] == "Re: Plans"
