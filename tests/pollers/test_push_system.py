"""Web Push through the whole system (issue #31): a browser subscribes at the gateway, a reminder
the inner plane holds fires, and the pollers push it to that browser once; the push service
(a local receiver) decrypts it with the browser's key and checks the VAPID signature against
the key the gateway gave. Real processes: nats-server, ledger, gateway, inner plane, pollers."""

from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import QueryRequest
from delegate.contracts.reminders import ReminderCommand, ReminderSpec
from delegate.runtime.bus import Bus
from tests.support.push_receiver import PushReceiver
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = pytest.mark.integration


async def test_a_fired_reminder_reaches_the_subscribed_browser_once(tmp_path: Path) -> None:
    receiver = PushReceiver().start()
    env = {"PUSH_ALLOW_PRIVATE_ENDPOINTS": "true", "PUSH_VAPID_SUBJECT": "mailto:me@example.com"}
    system = System(tmp_path, env=env)
    try:
        system.start("ledger", "gateway", "inner-plane", "pollers")
        phone = receiver.subscribe("phone")
        async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=10) as c:
            key = (await c.get("/api/push/key")).json()["key"]
            made = await c.post("/api/push/subscriptions", json=phone.json())
            assert made.status_code == 201, made.text
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "test-probe")
        try:
            spec = ReminderSpec(text="Take the bread out of the oven", at=utcnow() + timedelta(seconds=2))
            await bus.request(topics.INNER_REMINDERS, ReminderCommand(op="set", spec=spec))

            async def recorded() -> list[str]:
                reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["push.delivery"], limit=100))
                return [str(e.payload["status"]) for e in reply.events]

            async def sent() -> bool:
                return await recorded() == ["sending", "sent"]

            await eventually(sent, "the push recorded as sending, then sent", 60, interval=0.1,
                             explain=system.dump_logs)
        finally:
            await bus.close()
        [push] = receiver.pushes("phone")
        notice = receiver.decrypt(push)
        assert (notice["kind"], notice["title"]) == ("reminder", "Reminder")
        assert notice["body"] == "Take the bread out of the oven"
        assert receiver.vapid_claims(push, key)["sub"] == "mailto:me@example.com"
    finally:
        system.stop()
        receiver.stop()
