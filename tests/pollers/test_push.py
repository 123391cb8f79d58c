"""Web Push from the pollers' outbox (issue #31), against a local push service that decrypts
what it gets (RFC 8291) and checks the VAPID signature (RFC 8292): one push per event the owner
is told about and browser, also when the sender is SIGKILLed between the request and its record,
and a subscription the push service says is gone is dropped."""

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from delegate.contracts import streams, topics
from delegate.contracts.events import ActivationOutcome, Event, Message, make_event
from delegate.contracts.push import PushSubscription, SubscriptionIn, subscription_id
from delegate.runtime.webpush import PushStore, load_vapid, public_key
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401
from tests.support.push_receiver import Browser, PushReceiver

pytestmark = pytest.mark.integration

PUSH = {"push_allow_private_endpoints": True, "push_vapid_subject": "mailto:owner@example.com"}


@pytest.fixture(name="receiver")
def receiver_fixture() -> Any:
    receiver = PushReceiver().start()
    yield receiver
    receiver.stop()


async def _subscribe(outbox: OutboxRig, browser: Browser) -> PushSubscription:
    body = SubscriptionIn.model_validate(browser.json())
    sub = PushSubscription(id=subscription_id(body.endpoint), endpoint=body.endpoint, keys=body.keys,
                           created_at=datetime.now(UTC))
    store = PushStore()
    await store.open(outbox.bus)
    await store.put(sub)
    return sub


async def _append(outbox: OutboxRig, event: Event) -> None:
    await outbox.bus.publish(topics.ledger_append("inner-plane"), event, msg_id=event.id)


def _activation(summary: str, **kwargs: Any) -> Event:
    return make_event(ActivationOutcome(status="completed", summary=summary), channel="inner",
                      conversation_id=None, span_id=None, **kwargs)


async def _records(outbox: OutboxRig, parent: str) -> list[str]:
    return [str(e.payload["status"]) for e in await outbox.events("push.delivery") if e.parent_id == parent]


async def test_one_push_per_activation_encrypted_for_the_browser_and_signed(
    outbox: OutboxRig, receiver: PushReceiver
) -> None:
    phone, laptop = receiver.subscribe("phone"), receiver.subscribe("laptop")
    await _subscribe(outbox, phone)
    await _subscribe(outbox, laptop)
    await outbox.start(**PUSH)
    await _append(outbox, make_event(Message(text="hello"), role="user", channel="text",
                                           conversation_id=None, span_id=None))  # not news
    acted = _activation("I moved your dentist appointment to Friday 10:00.")
    await _append(outbox, acted)

    async def both_sent() -> bool:
        return sorted(await _records(outbox, acted.id)) == ["sending", "sending", "sent", "sent"]

    await outbox.until("both pushes recorded sent", both_sent)
    assert sorted(p.name for p in receiver.pushes()) == ["laptop", "phone"]  # the user's message made none
    server_key = public_key(load_vapid(outbox.system.runtime))
    for push in receiver.pushes():
        notice = receiver.decrypt(push)
        assert notice["kind"] == "activation" and notice["event_id"] == acted.id and notice["tag"] == acted.id
        assert notice["body"] == "I moved your dentist appointment to Friday 10:00."
        claims = receiver.vapid_claims(push, server_key)
        assert claims["sub"] == "mailto:owner@example.com"
        assert len(push.headers["topic"]) <= 32 and int(push.headers["ttl"]) > 0


async def test_a_push_interrupted_by_a_crash_is_recorded_unknown_and_not_sent_again(
    outbox: OutboxRig, receiver: PushReceiver
) -> None:
    phone = receiver.subscribe("phone")
    await _subscribe(outbox, phone)
    first = outbox.start_runner(**PUSH)

    async def consuming() -> bool:
        try:
            await outbox.bus.js.consumer_info("LEDGER", streams.POLLERS_PUSH)
            return True
        except Exception:  # not created yet
            return False

    await outbox.until("the push consumer", consuming, timeout=30)
    receiver.hold_next(60.0)  # the push service has it; its answer never reaches the sender
    acted = _activation("Your parcel was delivered.")
    await _append(outbox, acted)

    async def held() -> bool:
        return len(receiver.pushes()) == 1 and "sending" in await _records(outbox, acted.id)

    await outbox.until("the push to be under way", held, timeout=30)
    first.kill()

    outbox.start_runner(**PUSH)

    async def settled() -> bool:
        return "unknown" in await _records(outbox, acted.id)

    await outbox.until("the interrupted push recorded", settled, timeout=30)
    assert await _records(outbox, acted.id) == ["sending", "unknown"]
    later = _activation("And the plumber confirmed 3pm.")  # the restarted sender works on
    await _append(outbox, later)

    async def later_sent() -> bool:
        return await _records(outbox, later.id) == ["sending", "sent"]

    await outbox.until("the next push", later_sent, timeout=30)
    assert [receiver.decrypt(p)["event_id"] for p in receiver.pushes()] == [acted.id, later.id]


async def test_a_gone_subscription_is_dropped_and_stale_events_are_not_pushed(
    outbox: OutboxRig, receiver: PushReceiver
) -> None:
    phone = receiver.subscribe("phone")
    sub = await _subscribe(outbox, phone)
    receiver.answer("phone", 410)
    await outbox.start(**PUSH)
    old = _activation("Yesterday's news", ts=datetime.now(UTC) - timedelta(days=1))
    await _append(outbox, old)
    acted = _activation("Done.")
    await _append(outbox, acted)

    async def gone() -> bool:
        return await _records(outbox, acted.id) == ["sending", "gone"]

    await outbox.until("the push recorded gone", gone)
    store = PushStore()
    await store.open(outbox.bus)
    assert await store.get(sub.id) is None
    assert [p.name for p in receiver.pushes()] == ["phone"]  # the stale event made none
    assert await _records(outbox, old.id) == []
