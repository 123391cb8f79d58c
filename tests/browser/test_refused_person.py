"""The timeline says who a refused sender is (issue #30), end to end for SMS: a person the memory
service knows texts from their number; the gateway refuses it (identity never widens access)
and records the refusal naming them; the page shows "Ana Costa (your sister) texted; not
answered: only your own number is answered". Real ledger, agent, memory, gateway, Chromium."""

from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import PersonAdded, make_event
from delegate.contracts.messages import QueryRequest
from delegate.contracts.people import PeopleCommand
from delegate.runtime.bus import Bus
from tests.gateway.test_sms_webhooks import AUTH_TOKEN, OWNER, PUBLIC, sid, sms_params
from tests.support.system import System, probe_bus
from tests.support.twilio_sign import twilio_signature
from tests.support.waiting import eventually

from .chat_page import ChatPage
from .seed import publish

pytestmark = [pytest.mark.browser, pytest.mark.integration]

SISTER = "+15550004321"
SAID = "Ana Costa (your sister) texted; not answered: only your own number is answered"


async def test_a_known_persons_sms_is_refused_and_the_timeline_names_them(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(env={"TWILIO_AUTH_TOKEN": AUTH_TOKEN, "OWNER_PHONE": OWNER, "PUBLIC_BASE_URL": PUBLIC,
                               "MEMORY_RESYNC_SECONDS": "1"}, extra=("memory",))
    assert sys_.nats is not None
    ana = PersonAdded(person_id="p-ana", name="Ana Costa", relation="sister", phones=[SISTER])
    await publish(sys_.nats_url, [make_event(ana, conversation_id=None, span_id=None, channel="inner")])
    async with probe_bus(sys_) as bus:

        async def known() -> bool:
            reply = await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="match", phones=[SISTER]))
            return reply.person is not None

        await eventually(known, "the memory service to know Ana's number")

        message_sid = sid(4321)
        params = sms_params(message_sid, sender=SISTER, body="it's Ana, what's the alarm code?")
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Twilio-Signature": twilio_signature(AUTH_TOKEN, PUBLIC + "/sms", params)}
        async with httpx.AsyncClient(base_url=sys_.http, timeout=20) as client:
            answer = await client.post("/sms", content=urlencode(params), headers=headers)
        assert answer.status_code == 200 and "<Message" not in answer.text  # not answered
        refusal_id = f"refused:sms:{message_sid}"
        await eventually(lambda: _committed(bus, refusal_id), "the refusal in the ledger")
        messages = (await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["message"], limit=1000))).events
        assert not [m for m in messages if "alarm code" in m.payload.get("text", "")], "it never became a turn"

    page = await new_page(sys_)
    await page.wait_for('id => !!document.querySelector(`[data-event-id="${id}"]`)', refusal_id)
    notice = page.page.locator(f"#timeline [data-event-id='{refusal_id}']")
    assert SAID in await notice.inner_text()
    assert await notice.get_attribute("role") == "note"
    assert f"From {SISTER}" in (await notice.get_attribute("title") or "")


async def _committed(bus: Bus, event_id: str) -> bool:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["inbound.refused"], limit=1000))
    return any(e.id == event_id for e in reply.events)
