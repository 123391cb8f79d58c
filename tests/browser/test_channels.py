"""SMS and email in the one timeline: channel labels, sender, subject, attachments, delivery
status updating live, and refused senders as notices."""

import hashlib
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, Literal

import pytest

from delegate.contracts.events import (
    AttachmentStored,
    Channel,
    Delivery,
    DeliveryStatus,
    Event,
    InboundRefused,
    Message,
    Payload,
    Role,
    SpanOpened,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from tests.support.system import System

from .chat_page import ChatPage
from .seed import publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

OWNER = "+15550100"
STRANGER = "+15550199"

# The text a message's delivery line shows, and its data-delivery status.
DELIVERY = """id => {
  const n = document.querySelector(`#timeline article.msg[data-event-id="${id}"]`);
  if (!n) return null;
  const d = n.querySelector('.delivery-status');
  return d ? {status: n.dataset.delivery, text: d.textContent, label: d.getAttribute('aria-label')} : null;
}"""


class Timeline:
    """Events with strictly increasing timestamps, as the pollers and the agent write them."""

    def __init__(self) -> None:
        self.now: datetime = utcnow() - timedelta(hours=2)
        self.conversation_id = new_id()
        self.span_id: str | None = None
        self.events: list[Event] = []

    def add(
        self, payload: Payload, channel: Channel, *, role: Role | None = None, span: bool = True, **kw: Any
    ) -> Event:
        self.now += timedelta(seconds=5)
        ev = make_event(
            payload,
            conversation_id=self.conversation_id,
            span_id=self.span_id if span else None,
            channel=channel,
            role=role,
            ts=self.now,
            **kw,
        )
        self.events.append(ev)
        return ev

    def span(self, channel: Channel) -> None:
        self.span_id = new_id()
        self.add(SpanOpened(type="interaction"), channel)

    def delivery(self, answer: Event, status: DeliveryStatus, event_id: str, **kw: Any) -> Event:
        channel: Literal["sms", "email"] = "sms" if answer.channel == "sms" else "email"
        return self.add(
            Delivery(outbox_id=answer.id, channel=channel, status=status, **kw),
            channel,
            parent_id=answer.id,
            id=event_id,
        )


def status_event_id(outbox: str, sid: str, status: str) -> str:
    """The gateway's id for a status callback (see the outbox conventions)."""
    return "st:" + hashlib.sha256(f"{outbox}|{sid}|{status}".encode()).hexdigest()[:32]


async def test_sms_and_email_share_the_timeline(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate()
    assert sys_.nats is not None
    nats_url = sys_.nats_url
    t = Timeline()

    t.span("sms")
    sms_in = t.add(
        Message(
            text="Book the one with the terrace",
            client_msg_id="sms:SM100",
            meta={
                "from": OWNER,
                "message_sid": "SM100",
                "media": [{"url": "https://media.invalid/ME1", "content_type": "image/jpeg"}],
            },
        ),
        "sms",
        role="user",
    )
    t.add(
        AttachmentStored(
            name="ME1.jpg",
            content_type="image/jpeg",
            size=48_213,
            url="https://media.invalid/ME1",
            path="media/ME1.jpg",
            stored=True,
        ),
        "sms",
        parent_id=sms_in.id,
    )
    sms_out = t.add(Message(text="Done: Casa do Terraço, 3 nights."), "sms", role="assistant", parent_id=sms_in.id)
    t.delivery(sms_out, "sending", f"{sms_out.id}:sending:1", attempt=1)
    t.delivery(sms_out, "sent", f"{sms_out.id}:sent", external_ids=["SM200"], final=True)

    t.span("email")
    mail_in = t.add(
        Message(
            text="Please send me the itinerary as a list.",
            client_msg_id="email:" + "a" * 40,
            meta={
                "from": "owner@example.org",
                "subject": "Lisbon itinerary",
                "message_id": "<m1@example.org>",
                "references": [],
                "attachments": [
                    {
                        "name": "tickets.pdf",
                        "content_type": "application/pdf",
                        "size": 1_572_864,
                        "path": "mail/m1/tickets.pdf",
                        "stored": True,
                    },
                    {
                        "name": "video.mov",
                        "content_type": "video/quicktime",
                        "size": 90_000_000,
                        "path": None,
                        "stored": False,
                    },
                ],
                "auth": "dkim=pass",
            },
        ),
        "email",
        role="user",
    )
    t.add(
        AttachmentStored(
            name="video.mov",
            content_type="video/quicktime",
            size=90_000_000,
            stored=False,
            reason="larger than the 25 MB limit",
        ),
        "email",
        parent_id=mail_in.id,
    )
    mail_out = t.add(
        Message(text="1. Fly out 12 May\n2. Fly home 15 May"), "email", role="assistant", parent_id=mail_in.id
    )
    t.delivery(mail_out, "sending", f"{mail_out.id}:sending:1", attempt=1)
    t.delivery(
        mail_out, "failed", f"{mail_out.id}:failed", error="550 mailbox unavailable", error_code="550", final=True
    )

    refused = t.add(
        InboundRefused(sender=STRANGER, reason="not_owner", external_id="SM999", preview="You have won a prize"),
        "sms",
        span=False,
    )
    await publish(nats_url, t.events)

    page = await new_page(sys_)
    p = page.page
    await page.wait_for('id => !!document.querySelector(`[data-event-id="${id}"]`)', refused.id)

    # Every SMS and email message carries its channel label, the answers included.
    labels = await p.eval_on_selector_all(
        "#timeline article.msg[data-event-id]",
        """ns => ns.map(n => { const c = n.querySelector('.channel');
                               return [n.dataset.eventId, c.hidden ? null : c.textContent]; })""",
    )
    assert labels == [[sms_in.id, "SMS"], [sms_out.id, "SMS"], [mail_in.id, "Email"], [mail_out.id, "Email"]]
    # Delivery and attachment events are shown on their messages, never as rows of their own.
    shown = set(await page.event_ids())
    assert shown == {sms_in.id, sms_out.id, mail_in.id, mail_out.id, refused.id}

    def msg(ev: Event) -> Any:
        return p.locator(f"#timeline article.msg[data-event-id='{ev.id}']")

    # The sender on inbound messages, the subject on the email, attachments with type and size.
    assert await msg(sms_in).locator(".msg-from").inner_text() == f"from {OWNER}"
    assert await msg(mail_in).locator(".msg-from").inner_text() == "from owner@example.org"
    assert not await msg(sms_out).locator(".msg-from").is_visible()
    assert await msg(mail_in).locator(".msg-subject").inner_text() == "Subject: Lisbon itinerary"
    assert await msg(sms_in).locator(".attachment").evaluate_all("ns => ns.map(n => n.textContent)") == [
        "ME1.jpgimage/jpeg, 47 KB"
    ]
    rows = msg(mail_in).locator(".attachment")
    assert await rows.count() == 2
    assert await rows.nth(0).get_attribute("aria-label") == "Attachment tickets.pdf, application/pdf, 1.5 MB"
    assert await rows.nth(1).get_attribute("aria-label") == (
        "Attachment video.mov, video/quicktime, 86 MB, not stored: larger than the 25 MB limit"
    )

    # Delivery: words and symbols, the failure prominent with its error.
    assert await p.evaluate(DELIVERY, sms_out.id) == {"status": "sent", "text": "✓ sent", "label": "Delivery: sent"}
    failed = await p.evaluate(DELIVERY, mail_out.id)
    assert failed == {
        "status": "failed",
        "text": "⚠ failed: 550 mailbox unavailable, code 550",
        "label": "Delivery: failed — 550 mailbox unavailable, code 550",
    }
    assert await msg(mail_out).evaluate("n => n.classList.contains('delivery-bad')")
    assert await msg(sms_in).locator(".delivery").is_hidden(), "an inbound message has no delivery line"

    # The refused sender: a small notice, not a bubble.
    notice = p.locator(f"#timeline [data-event-id='{refused.id}']")
    assert await notice.evaluate("n => n.tagName") == "DIV"
    assert "Refused an SMS from +15550199 (not the owner)" in await notice.inner_text()
    assert await notice.get_attribute("role") == "note"

    # Live: Twilio's callback says delivered; the same bubble updates in place.
    await msg(sms_out).evaluate("n => { n._probe = 'kept'; }")
    t.delivery(sms_out, "delivered", status_event_id(sms_out.id, "SM200", "delivered"), external_ids=["SM200"])
    await publish(nats_url, t.events[-1:])
    await page.wait_for(f"() => ({DELIVERY})('{sms_out.id}')?.status === 'delivered'")
    assert await p.evaluate(DELIVERY, sms_out.id) == {
        "status": "delivered",
        "text": "✓✓ delivered",
        "label": "Delivery: delivered",
    }
    assert await msg(sms_out).evaluate("n => n._probe") == "kept", "the message node was rebuilt"

    # A late "sent" callback (out of order) never moves it back. A notice published after it
    # shows the page has seen it.
    t.delivery(sms_out, "sent", status_event_id(sms_out.id, "SM200", "sent"), external_ids=["SM200"])
    late_notice = t.add(
        InboundRefused(
            sender="stranger@example.net", reason="unauthenticated", subject="Urgent invoice", detail="dmarc=fail"
        ),
        "email",
        span=False,
    )
    await publish(nats_url, t.events[-2:])
    await page.wait_for('id => !!document.querySelector(`[data-event-id="${id}"]`)', late_notice.id)
    assert (await p.evaluate(DELIVERY, sms_out.id))["status"] == "delivered"
    late = p.locator(f"#timeline [data-event-id='{late_notice.id}']")
    assert "Refused an email from stranger@example.net (failed sender authentication)" in await late.inner_text()
    assert "Subject: Urgent invoice" in await late.inner_text()

    await page.screenshot("channels")

    # On a phone the long lines wrap instead of pushing the page sideways.
    phone = await new_page(
        sys_, viewport={"width": 360, "height": 780}, device_scale_factor=2, is_mobile=True, has_touch=True
    )
    await phone.wait_for('id => !!document.querySelector(`[data-event-id="${id}"]`)', late_notice.id)
    overflow = await phone.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page scrolls sideways by {overflow}px on a phone"
    await phone.screenshot("channels-phone")

    for pg in (page, phone):
        pg.assert_clean()
