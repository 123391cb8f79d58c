"""The SMS outbox against the Twilio REST stand-in: delivered once, retried on 5xx, verified
(not resent) after an uncertain attempt, split at sentences, final on a 4xx."""

from urllib.parse import parse_qs, urlsplit

import pytest

from delegate.contracts import streams, topics
from delegate.contracts.channels import SMS_BODY_LIMIT, OutboundSms
from delegate.contracts.messages import DeadLetter
from delegate.contracts.topics import dead_letters
from delegate.runtime.bus import MSG_ID
from tests.pollers.outbox_fixtures import OWNER_PHONE, PUBLIC, OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401

pytestmark = pytest.mark.integration


def _sms(text: str, **fields: object) -> OutboundSms:
    return OutboundSms(text=text, parent_id="answer-1", conversation_id="conv-1", span_id="span-1", **fields)


async def test_an_sms_is_delivered_once_with_the_owner_number_and_a_status_callback(outbox: OutboxRig) -> None:
    health = await outbox.start()
    sms = _sms("Done - reminder set for 5pm.")
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    (message,) = outbox.twilio.messages
    assert (message["to"], message["from"], message["body"]) == (OWNER_PHONE, outbox.twilio.phone_number, sms.text)
    assert sent.id == f"{sms.id}:sent"
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]
    assert sent.payload["parts"] == 1
    assert (sent.parent_id, sent.channel, sent.conversation_id, sent.span_id) == ("answer-1", "sms", "conv-1", "span-1")
    assert [e.id for e in await outbox.deliveries(sms.id)] == [f"{sms.id}:sending:1", f"{sms.id}:sent"]

    callback = outbox.twilio.status_callback(message["sid"])
    assert callback is not None
    parts = urlsplit(callback)
    assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{PUBLIC}/sms/status"
    assert parse_qs(parts.query) == {"outbox": [sms.id], "parent": ["answer-1"]}
    assert health.sms.state == "reachable" and health.sms.healthy

    # the same outbox message published again (an agent redelivery) is deduplicated by JetStream
    await outbox.send(sms)
    again = _sms("A later message.")
    await outbox.send(again)
    await outbox.outcome(again.id)
    assert outbox.twilio.bodies() == [sms.text, again.text]


async def test_a_500_is_retried_and_the_message_delivered_once(outbox: OutboxRig) -> None:
    await outbox.start()
    outbox.twilio.fail_next(1, status=500)
    sms = _sms("Your table is booked.")
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    assert sent.payload["status"] == "sent"
    assert outbox.twilio.bodies() == [sms.text]
    assert len(outbox.twilio.creates()) == 2
    assert await outbox.statuses(sms.id) == ["sending", "sending", "sent"]
    assert [e.payload.get("attempt") for e in await outbox.deliveries(sms.id)] == [1, 2, 2]


async def test_a_timed_out_send_is_verified_with_twilio_instead_of_sent_again(outbox: OutboxRig) -> None:
    # Twilio stores the message but answers after the client's timeout: the retry must find it
    await outbox.start(outbox_http_timeout_s=0.5)
    outbox.twilio.delay_next(3.0, store=True)
    sms = _sms("Flight moved to 9:40.")
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    (message,) = outbox.twilio.messages
    assert len(outbox.twilio.creates()) == 1
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]
    assert await outbox.statuses(sms.id) == ["sending", "sending", "sent"]
    lists = [r for r in outbox.twilio.requests if r.method == "GET" and r.path.endswith("/Messages.json")]
    assert lists and lists[0].query["To"] == [OWNER_PHONE]


async def test_a_long_text_is_split_at_sentences_and_every_word_arrives(outbox: OutboxRig) -> None:
    await outbox.start()
    sentences = [f"Item {n} of the weekly summary is ready for review and needs nothing from you." for n in range(60)]
    text = " ".join(sentences)
    assert len(text) > 2 * SMS_BODY_LIMIT
    sms = _sms(text)
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    bodies = outbox.twilio.bodies()
    assert len(bodies) == sent.payload["parts"] == 3
    assert all(len(b) <= SMS_BODY_LIMIT for b in bodies)
    assert all(b.endswith("needs nothing from you.") and b.startswith("Item ") for b in bodies)
    assert " ".join(bodies) == text
    assert sent.payload["external_ids"] == [m["sid"] for m in outbox.twilio.messages]


async def test_a_400_is_final_and_recorded_as_failed(outbox: OutboxRig) -> None:
    health = await outbox.start()
    outbox.twilio.fail_next(1, status=400, code=21211, message="The 'To' number is not a valid phone number.")
    sms = _sms("Hello")
    await outbox.send(sms)
    failed = await outbox.outcome(sms.id)

    assert failed.id == f"{sms.id}:failed"
    assert failed.payload["status"] == "failed" and failed.payload["final"] is True
    assert failed.payload["error_code"] == "21211"
    assert "not a valid phone number" in failed.payload["error"]
    assert outbox.twilio.messages == [] and len(outbox.twilio.creates()) == 1
    assert await outbox.statuses(sms.id) == ["sending", "failed"]
    assert health.sms.healthy  # one bad message says nothing about Twilio


async def test_persistent_503s_end_in_a_failed_record_after_the_configured_attempts(outbox: OutboxRig) -> None:
    health = await outbox.start(outbox_attempts=3)
    outbox.twilio.fail_next(3, status=503)
    sms = _sms("Hello")
    await outbox.send(sms)
    failed = await outbox.outcome(sms.id)

    assert failed.payload["status"] == "failed" and "gave up after 3 attempts" in failed.payload["error"]
    assert await outbox.statuses(sms.id) == ["sending", "sending", "sending", "failed"]
    assert outbox.twilio.messages == []
    assert health.sms.state == "failing" and not health.sms.healthy


async def test_sms_without_configuration_is_recorded_as_failed(outbox: OutboxRig) -> None:
    health = await outbox.start(twilio_account_sid=None)
    sms = _sms("Hello")
    await outbox.send(sms)
    failed = await outbox.outcome(sms.id)

    assert failed.payload["error"] == "SMS is not configured (TWILIO_* / OWNER_PHONE)"
    assert failed.payload["final"] is True
    assert outbox.twilio.requests == []
    assert not health.sms.enabled


async def test_an_undecodable_outbox_message_is_dead_lettered_and_the_next_one_sent(outbox: OutboxRig) -> None:
    await outbox.start()
    await outbox.bus.js.publish(topics.SMS_OUT.subject, b'{"type": "sms", "text": ""}', headers={MSG_ID: "bad-1"})
    sms = _sms("After the bad one.")
    await outbox.send(sms)
    await outbox.outcome(sms.id)

    letter = await outbox.bus.js.get_last_msg("DEAD", dead_letters(streams.POLLERS_SMS).subject)
    assert letter.data is not None
    assert DeadLetter.model_validate_json(letter.data).reason.startswith("undecodable")
    assert outbox.twilio.bodies() == [sms.text]
