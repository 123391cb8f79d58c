"""The Web Push sender: the outbox's once-only discipline, for pushes (issue #31).

It reads the events appended to the ledger (durable consumer ``pollers-push`` on LEDGER) and,
for each one the owner is told about (``push_notices``), sends one push to every subscribed
browser. Each (event, browser) pair is one push with a derived id, kept like an SMS:

- ``push:<id>:sending`` is recorded before the request;
- then ``:sent``, ``:failed`` or ``:gone`` (404/410: the browser unsubscribed; the record
  is deleted from the bucket) ends it;
- a message delivered again after a crash looks its pushes up first: one with a result is
  done; one with only ``sending`` may or may not have reached the push service, so it is
  recorded ``:unknown`` and NOT sent again.

Why not resend: RFC 8030's ``Topic`` header (we set it to the push id) makes a push service
replace a message it still holds, but a message already handed to the browser is shown again,
so a blind resend can notify twice. We would rather lose one notice in the rare crash between
request and record than repeat one; the in-page timeline still shows the event.

Events older than PUSH_MAX_AGE_S are skipped: a push about something long past (a consumer
created afresh replays the stream's week) is noise, not news.
"""

import hashlib
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg

from delegate.contracts.events import Event, PushDelivery, PushStatus, make_event
from delegate.contracts.push import Notice, PushSubscription
from delegate.runtime.webpush import EndpointRefused, PushStore, check_endpoint, load_vapid

from .deliveries import DeliveryLog, redelivered
from .push_notices import notice_for
from .settings import Settings

if TYPE_CHECKING:  # loaded with the key (load_vapid), at the first push: cryptography's bindings with it
    from py_vapid import Vapid02

log = logging.getLogger(__name__)

DONE = ("sent", "failed", "gone", "unknown")


def push_id(event_id: str, subscription_id: str) -> str:
    """32 base64url-safe characters: also the push's RFC 8030 Topic (at most 32 allowed)."""
    return hashlib.sha256(f"{event_id}|{subscription_id}".encode()).hexdigest()[:32]


def record_id(pid: str, status: str) -> str:
    return f"push:{pid}:{status}"


class PushSender:
    def __init__(self, settings: Settings, deliveries: DeliveryLog, store: PushStore) -> None:
        self.settings = settings
        self.deliveries = deliveries
        self.store = store
        self._vapid: Vapid02 | None = None

    def vapid(self) -> "Vapid02":
        if self._vapid is None:  # made on first use, so a pollers without subscriptions never makes one
            configured = self.settings.push_vapid_private_key
            self._vapid = load_vapid(self.settings.runtime_data_dir,
                                     configured.get_secret_value() if configured else None)
        return self._vapid

    async def handle(self, event: Event, raw: Msg) -> None:
        notice = notice_for(event)
        if notice is None:
            return
        age = (datetime.now(UTC) - event.ts).total_seconds()
        if age > self.settings.push_max_age_s:
            log.info("push for %s skipped: %.0f s old", event.id, age)
            return
        subscriptions = await self.store.all()
        if not subscriptions:
            return
        again = redelivered(raw)
        if again:
            await self.deliveries.caught_up()
        for sub in subscriptions:
            await self._once(event, notice, sub, again)

    async def _once(self, event: Event, notice: Notice, sub: PushSubscription, again: bool) -> None:
        pid = push_id(event.id, sub.id)
        if again:
            for status in DONE:
                if await self.deliveries.get(record_id(pid, status)) is not None:
                    return
            if await self.deliveries.get(record_id(pid, "sending")) is not None:
                await self._record(event, pid, sub, "unknown",
                                   error="interrupted between the request and its record: not sent again")
                return
        await self._record(event, pid, sub, "sending")
        status, http_status, error = await self._send(notice, sub, pid)
        await self._record(event, pid, sub, status, http_status=http_status, error=error)
        if status == "gone":
            await self.store.delete(sub.id)

    async def _send(self, notice: Notice, sub: PushSubscription, pid: str) -> tuple[PushStatus, int | None, str | None]:
        try:
            await check_endpoint(sub.endpoint, self.settings.push_allow_private_endpoints)
        except EndpointRefused as exc:
            return "failed", None, f"endpoint refused: {exc}"
        # Loaded with the first push, not at start: pywebpush sends with aiohttp, which the
        # pollers otherwise start without (~11 MB; tests/runtime/test_lean_imports.py).
        import aiohttp
        from pywebpush import WebPushException, webpush_async

        headers: dict[str, str | int | float] = {"Topic": pid, "Urgency": "normal"}
        try:
            response: Any = await webpush_async(
                sub.info(),
                notice.model_dump_json(),
                vapid_private_key=self.vapid(),
                vapid_claims={"sub": self.settings.push_vapid_subject},
                ttl=int(self.settings.push_ttl_s),
                headers=headers,
                timeout=self.settings.outbox_http_timeout_s,
            )
        except WebPushException as exc:
            code = exc.status_code
            return ("gone" if code in (404, 410) else "failed"), code, str(exc)[:2000]
        except (TimeoutError, aiohttp.ClientError, OSError) as exc:
            return "failed", None, repr(exc)[:2000]
        code = int(response.status)
        if code in (404, 410):
            return "gone", code, "the push service no longer knows this subscription"
        if code >= 300:
            return "failed", code, f"push service answered {code}"
        return "sent", code, None

    async def _record(
        self, event: Event, pid: str, sub: PushSubscription, status: PushStatus, *,
        http_status: int | None = None, error: str | None = None,
    ) -> None:
        payload = PushDelivery(push_id=pid, subscription_id=sub.id, status=status, http_status=http_status,
                               error=error[:2000] if error else None)
        await self.deliveries.append(make_event(
            payload, id=record_id(pid, status), conversation_id=event.conversation_id, span_id=event.span_id,
            channel=event.channel, parent_id=event.id,
        ))
