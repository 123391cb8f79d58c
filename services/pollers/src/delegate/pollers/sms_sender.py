"""OutboundSms -> Twilio REST, once: split under the body limit, ``sending`` before each
attempt, verification with Twilio instead of a blind resend, ``sent``/``failed`` at the end.

A send that may have reached Twilio without us seeing the answer (a timeout, a dropped
connection, a sender killed mid-request and redelivered) is checked against Twilio's list of
messages to the owner before anything is sent again: a part whose body is there (as sent, or
as Twilio's Smart Encoding rewrote it: ``sms_encoding``), created since the first attempt,
counts as sent. Two different outbox messages with the same text a few minutes apart could be
mistaken for each other there; only a retry after such an uncertain attempt looks, never a
first attempt.
"""

import asyncio
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from nats.aio.msg import Msg

from delegate.contracts.channels import OutboundSms
from delegate.contracts.ids import utcnow
from delegate.runtime.bus import Retryable
from delegate.runtime.retry import Backoff, sleep_unless

from .deliveries import DeliveryLog, redelivered
from .health import Health
from .settings import Settings
from .sms_encoding import same_body
from .sms_split import split_sms

if TYPE_CHECKING:  # the Twilio SDK (and requests) loads when SMS is configured and sent, not at start
    from twilio.rest import Client

log = logging.getLogger(__name__)

NOT_CONFIGURED = "SMS is not configured (TWILIO_* / OWNER_PHONE)"
CLOCK_SKEW = timedelta(minutes=2)  # Twilio's clock against ours, for "created since the first attempt"
VERIFY_LIMIT = 200  # the newest messages to the owner searched for an earlier attempt's parts


class Stopping(Retryable):
    """The pollers are stopping between attempts: deliver the message again after the restart."""


class _Transient(Exception):
    """A try that may succeed later (5xx, 429, timeout, connection). ``uncertain``: it may
    have reached Twilio, so the next try verifies first."""

    def __init__(self, error: str, code: str | None, uncertain: bool) -> None:
        super().__init__(error)
        self.error, self.code, self.uncertain = error, code, uncertain


class _Final(Exception):
    def __init__(self, error: str, code: str | None, status: int) -> None:
        super().__init__(error)
        self.error, self.code, self.status = error, code, status


def status_callback(settings: Settings, outbox_id: str, parent_id: str | None) -> str:
    query = {"outbox": outbox_id, **({"parent": parent_id} if parent_id else {})}
    return settings.public_base_url.rstrip("/") + "/sms/status?" + urlencode(query)


class SmsSender:
    def __init__(
        self, settings: Settings, deliveries: DeliveryLog, health: Health, stop: asyncio.Event, client: "Client | None"
    ) -> None:
        self.settings, self.deliveries, self.health, self.stop = settings, deliveries, health, stop
        self.client = client

    async def handle(self, msg: OutboundSms, raw: Msg) -> None:
        again = redelivered(raw)
        if again:
            await self.deliveries.caught_up()
            if await self.deliveries.outcome(msg.id) is not None:
                return  # done before a crash or a lost ack
        if self.client is None or not self.settings.sms_enabled:
            await self.deliveries.record(msg, "failed", error=NOT_CONFIGURED, final=True)
            return
        parts = split_sms(msg.text)
        earlier = await self.deliveries.attempts(msg.id) if again else []
        attempt = len(earlier)
        since = earlier[0].ts if earlier else utcnow()
        uncertain = bool(earlier)  # an earlier process's attempt may have reached Twilio
        sids: dict[int, str] = {}
        backoff = Backoff(initial=self.settings.outbox_backoff_s, maximum=self.settings.outbox_backoff_max_s)
        for tried in range(1, self.settings.outbox_attempts + 1):
            attempt += 1
            await self.deliveries.record(msg, "sending", attempt=attempt, parts=len(parts))
            try:
                if uncertain:
                    sids.update(await self._verify(parts, sids, since))
                for index, body in enumerate(parts):
                    if index not in sids:
                        sids[index] = await self._create(body, msg)
            except _Final as exc:
                if exc.status in (401, 403):
                    self.health.sms.failing(exc.error)  # credentials or account: every send will fail
                await self.deliveries.record(msg, "failed", attempt=attempt, parts=len(parts), error=exc.error,
                                             error_code=exc.code, external_ids=[sids[i] for i in sorted(sids)],
                                             final=True)
                return
            except _Transient as exc:
                uncertain = uncertain or exc.uncertain
                log.warning("sms %s attempt %d failed: %s", msg.id, attempt, exc.error)
                if tried == self.settings.outbox_attempts:
                    self.health.sms.failing(exc.error)
                    await self.deliveries.record(
                        msg, "failed", attempt=attempt, parts=len(parts),
                        error=f"gave up after {tried} attempts: {exc.error}", error_code=exc.code,
                        external_ids=[sids[i] for i in sorted(sids)], final=True,
                    )
                    return
                if not await sleep_unless(self.stop, backoff.next_delay()):
                    raise Stopping("stopping between attempts") from None
                continue
            self.health.sms.ok("reachable", "Twilio REST")
            await self.deliveries.record(msg, "sent", attempt=attempt, parts=len(parts),
                                         external_ids=[sids[i] for i in range(len(parts))], final=True)
            return

    async def _create(self, body: str, msg: OutboundSms) -> str:
        client, settings = self.client, self.settings
        assert client is not None

        def create() -> Any:
            return client.messages.create(
                to=settings.owner_phone, from_=settings.twilio_phone_number, body=body,
                status_callback=status_callback(settings, msg.id, msg.parent_id),
                smart_encoded=True,  # GSM-7 lookalikes for curly quotes and dashes: fewer segments
            )

        message = await self._call(create, sending=True)
        return str(message.sid)

    async def _verify(self, parts: list[str], known: dict[int, str], since: datetime) -> dict[int, str]:
        """Parts an earlier attempt already delivered, by exact body among the owner's newest
        messages created since the first attempt (each Twilio message matches one part)."""
        client, settings = self.client, self.settings
        assert client is not None

        def listing() -> Any:
            return client.messages.list(to=settings.owner_phone, from_=settings.twilio_phone_number,
                                        limit=VERIFY_LIMIT)

        messages = await self._call(listing, sending=False)
        used = set(known.values())
        found: dict[int, str] = {}
        # oldest first, so the parts of one earlier attempt pair up with its messages in order
        for message in reversed(list(messages)):
            created = message.date_created
            if message.sid in used or (created is not None and created < since - CLOCK_SKEW):
                continue
            for index, body in enumerate(parts):
                if index not in known and index not in found and same_body(message.body, body):
                    found[index] = str(message.sid)
                    used.add(message.sid)
                    break
        if found:
            log.info("verified %d part(s) already at Twilio: %s", len(found), ", ".join(found.values()))
        return found

    async def _call(self, fn: Any, *, sending: bool) -> Any:
        """Run one SDK call in a worker thread and sort its failure into final or transient."""
        import requests
        from twilio.base.exceptions import TwilioException, TwilioRestException

        try:
            return await asyncio.to_thread(fn)
        except TwilioRestException as exc:
            code = str(exc.code) if exc.code is not None else None
            error = f"Twilio answered HTTP {exc.status}" + (f" (code {exc.code})" if exc.code else "") + f": {exc.msg}"
            if exc.status == 429 or exc.status >= 500:
                raise _Transient(error, code, uncertain=False) from exc
            raise _Final(error, code, exc.status) from exc
        except requests.Timeout as exc:
            # a read timeout may come after Twilio created the message; a connect timeout never
            uncertain = sending and not isinstance(exc, requests.ConnectTimeout)
            raise _Transient(f"Twilio did not answer in time: {exc}", None, uncertain=uncertain) from exc
        except requests.ConnectionError as exc:
            raise _Transient(f"could not reach Twilio: {exc}", None, uncertain=sending) from exc
        except (TwilioException, requests.RequestException, OSError) as exc:
            raise _Transient(f"Twilio request failed: {exc}", None, uncertain=sending) from exc
