"""The email outbox against a real SMTP server (aiosmtpd): threading headers, a Message-ID
derived from the outbox id, text + HTML, and the SMTP reply codes' retry/final split."""

from datetime import timedelta
from email.utils import parsedate_to_datetime

import pytest

from delegate.contracts.channels import OutboundEmail
from delegate.contracts.ids import utcnow
from delegate.pollers.email_out import reply_subject
from tests.pollers.outbox_fixtures import OWNER_EMAIL, SENDER, OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401

pytestmark = pytest.mark.integration


def _mail(**fields: object) -> OutboundEmail:
    values: dict[str, object] = {
        "subject": "Re: Dentist", "text": "Booked for **Tuesday** at 10.\n\nBring <your card> & the form.",
        "in_reply_to": "<m2@example.com>", "references": ["<m1@example.com>"], "parent_id": "answer-3",
        "conversation_id": "conv-3",
    }
    values.update(fields)
    return OutboundEmail(**values)


async def test_a_reply_is_threaded_with_a_message_id_from_its_outbox_id(outbox: OutboxRig) -> None:
    health = await outbox.start()
    mail = _mail()
    await outbox.send(mail)
    sent = await outbox.outcome(mail.id)

    (captured,) = outbox.smtp.messages
    assert captured.mail_from == SENDER and captured.rcpt_tos == [OWNER_EMAIL]
    message = captured.message
    assert message["From"] == SENDER and message["To"] == OWNER_EMAIL
    assert message["Subject"] == "Re: Dentist"
    assert message["Message-ID"] == f"<{mail.id}@mail.example.test>"
    assert message["In-Reply-To"] == "<m2@example.com>"
    assert message["References"] == "<m1@example.com> <m2@example.com>"
    date = parsedate_to_datetime(message["Date"])
    assert date.utcoffset() == timedelta(0) and abs(utcnow() - date) < timedelta(minutes=1)
    assert message.get_content_type() == "multipart/alternative"
    plain = message.get_body(("plain",))
    html = message.get_body(("html",))
    assert plain is not None and html is not None
    assert plain.get_content().rstrip("\n") == mail.text
    body = html.get_content()
    assert "<strong>Tuesday</strong>" in body
    assert "&lt;your card&gt; &amp; the form" in body and "<your card>" not in body

    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["Message-ID"]]
    assert (sent.parent_id, sent.channel, sent.conversation_id) == ("answer-3", "email", "conv-3")
    assert await outbox.statuses(mail.id) == ["sending", "sent"]
    assert health.smtp.state == "reachable"


async def test_a_doubled_re_is_sent_once_and_a_header_cannot_be_smuggled_in(outbox: OutboxRig) -> None:
    await outbox.start()
    mail = _mail(subject="RE: Re:  Dentist\r\nBcc: victim@example.com", in_reply_to="<x@y>\r\nBcc: v@example.com",
                 references=["not an id", "<ok@example.com>"])
    await outbox.send(mail)
    await outbox.outcome(mail.id)

    message = outbox.smtp.messages[0].message
    assert message["Subject"] == "Re: Dentist Bcc: victim@example.com"
    assert message["Bcc"] is None and message["In-Reply-To"] is None
    assert message["References"] == "<ok@example.com>"
    assert outbox.smtp.messages[0].rcpt_tos == [OWNER_EMAIL]


def test_reply_subject_keeps_one_prefix() -> None:
    assert reply_subject("Re: Re: RE:Plans") == "Re: Plans"
    assert reply_subject("AW: Re: Plans") == "Re: Plans"
    assert reply_subject("Plans for re: invent") == "Plans for re: invent"
    assert reply_subject("  Weekly\n report ") == "Weekly report"


async def test_a_4xx_is_retried_and_the_mail_sent_once(outbox: OutboxRig) -> None:
    await outbox.start()
    outbox.smtp.reply_next("451 4.3.0 Temporary failure, try later")
    mail = _mail()
    await outbox.send(mail)
    sent = await outbox.outcome(mail.id)

    assert sent.payload["status"] == "sent"
    assert len(outbox.smtp.messages) == 1
    assert await outbox.statuses(mail.id) == ["sending", "sending", "sent"]


async def test_a_5xx_is_final_and_recorded_as_failed(outbox: OutboxRig) -> None:
    health = await outbox.start()
    outbox.smtp.reply_next("554 5.7.1 Message rejected as spam")
    mail = _mail()
    await outbox.send(mail)
    failed = await outbox.outcome(mail.id)

    assert failed.payload["status"] == "failed" and failed.payload["final"] is True
    assert failed.payload["error_code"] == "554" and "rejected as spam" in failed.payload["error"]
    assert outbox.smtp.messages == []
    assert await outbox.statuses(mail.id) == ["sending", "failed"]
    assert health.smtp.state == "failing"


async def test_an_unreachable_smtp_server_is_retried_then_failed_and_shown_failing(outbox: OutboxRig) -> None:
    from delegate.launcher.procs import free_port

    health = await outbox.start(smtp_port=free_port(), outbox_attempts=2)
    mail = _mail()
    await outbox.send(mail)
    failed = await outbox.outcome(mail.id)

    assert failed.payload["status"] == "failed" and "gave up after 2 attempts" in failed.payload["error"]
    assert await outbox.statuses(mail.id) == ["sending", "sending", "failed"]
    assert health.smtp.state == "failing" and health.smtp.last_error


async def test_email_without_smtp_is_recorded_as_failed(outbox: OutboxRig) -> None:
    health = await outbox.start(smtp_host=None)
    mail = _mail()
    await outbox.send(mail)
    failed = await outbox.outcome(mail.id)

    assert failed.payload["error"] == "Email is not configured (SMTP_HOST / OWNER_EMAIL)"
    assert outbox.smtp.messages == []
    assert not health.smtp.enabled
