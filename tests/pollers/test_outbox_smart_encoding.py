"""SMS go with Twilio's SmartEncoded: curly quotes and dashes become GSM-7 lookalikes, so a reply
is not charged as UCS-2. The stand-in stores the replaced body (the harder case), and a send
whose answer was lost, or whose sender was killed, is still found there and never repeated."""

import httpx
import pytest

from delegate.contracts import streams
from delegate.contracts.channels import OutboundSms
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401
from tests.support.twilio_standin import API, TwilioStandin

pytestmark = pytest.mark.integration

CURLY = "It\u2019s booked \u2014 \u201cTable for two\u201d at 8\u2026"
AS_GSM7 = 'It\'s booked - "Table for two" at 8...'


async def test_an_sms_is_sent_smart_encoded(outbox: OutboxRig) -> None:
    await outbox.start()
    sms = OutboundSms(text=CURLY, parent_id="answer-1")
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    (create,) = outbox.twilio.creates()
    assert create.form["SmartEncoded"] == ["true"] and create.form["Body"] == [CURLY]
    (message,) = outbox.twilio.messages
    assert message["body"] == AS_GSM7  # one GSM-7 segment, not two UCS-2 ones
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]


async def test_a_smart_encoded_send_whose_answer_was_lost_is_found_not_sent_again(outbox: OutboxRig) -> None:
    await outbox.start(outbox_http_timeout_s=0.5)
    outbox.twilio.delay_next(3.0, store=True)  # stored, answered after the client gave up
    sms = OutboundSms(text=CURLY, parent_id="answer-2")
    await outbox.send(sms)
    sent = await outbox.outcome(sms.id)

    (message,) = outbox.twilio.messages
    assert len(outbox.twilio.creates()) == 1
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]


async def test_a_smart_encoded_sms_interrupted_by_a_crash_is_verified_not_sent_twice(outbox: OutboxRig) -> None:
    first = outbox.start_runner()

    async def consuming() -> bool:
        return await outbox.consumer_exists(streams.POLLERS_SMS)

    await outbox.until("the SMS consumer", consuming)
    outbox.twilio.delay_next(60.0, store=True)  # Twilio has it; the answer never reaches the sender
    sms = OutboundSms(text=CURLY, parent_id="answer-3")
    await outbox.send(sms)

    async def held() -> bool:
        return len(outbox.twilio.creates()) == 1 and "sending" in await outbox.statuses(sms.id)

    await outbox.until("the send to be under way", held)
    first.kill()  # SIGKILL, mid-request

    outbox.start_runner()
    sent = await outbox.outcome(sms.id, timeout=30)
    (message,) = outbox.twilio.messages
    assert message["body"] == AS_GSM7
    assert len(outbox.twilio.creates()) == 1
    assert sent.payload["status"] == "sent" and sent.payload["external_ids"] == [message["sid"]]


def test_the_standin_refuses_a_parameter_twilio_does_not_have_and_keeps_an_emoji_body_as_it_is(
    twilio: TwilioStandin,
) -> None:
    tw = twilio
    url = f"{tw.url}{API}/Accounts/{tw.account_sid}/Messages.json"
    base = {"To": "+15550001111", "From": tw.phone_number, "Body": "It\u2019s here \U0001F600"}
    with httpx.Client(auth=(tw.account_sid, tw.auth_token)) as http:
        for extra in ({"SmartEncoding": "true"}, {"smart_encoded": "true"}, {"SmartEncoded": "yes"}):
            refused = http.post(url, data={**base, **extra})
            assert refused.status_code == 400 and refused.json()["code"] == 20001, extra
        kept = http.post(url, data={**base, "SmartEncoded": "true"})
    assert kept.status_code == 201 and kept.json()["body"] == base["Body"]  # the emoji needs UCS-2 anyway
    assert [m["body"] for m in tw.messages] == [base["Body"]]
