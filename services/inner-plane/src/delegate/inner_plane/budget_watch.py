"""The spend lines (BUDGET_*): follow committed ``model.usage`` into the state, tell the owner once.

``on_event`` folds usage into ``BrokerState.spend`` (replay and live alike, so a rebuilt state
spends what the ledger says) and notes the channel the owner last wrote on. The worker, once
caught up, tells the owner when a line is reached: once per (line, period), on that channel,
with the figures. Once also across a crash: the SMS or email carries an id derived from the
line and period (the outbox's Nats-Msg-Id, and the sender's delivery events, make a resend a
no-op), and the ``budget.notice`` event written after it, with a derived id, is the record that
it was done. When a hold ends it wakes the workers that wait on it.
"""

import asyncio
import logging
from datetime import datetime
from typing import Literal

from delegate.contracts import topics
from delegate.contracts.budget import BudgetLine, BudgetReply, BudgetRequest
from delegate.contracts.channels import OutboundEmail, OutboundSms
from delegate.contracts.events import BudgetNotice, Event, Message, make_event
from delegate.contracts.ids import utcnow
from delegate.contracts.topics import M, Topic
from delegate.runtime.bus import BusUnavailable
from delegate.runtime.retry import retrying
from delegate.runtime.spend import BACKGROUND, Hold

from .context import Context, derived_id

log = logging.getLogger(__name__)

OWNER_CHANNELS = frozenset({"text", "sms", "email", "browser_voice", "phone"})


class BudgetWatch:
    def __init__(self, ctx: Context, wakes: list[asyncio.Event]) -> None:
        self.ctx = ctx
        self.wake = asyncio.Event()
        self.wakes = wakes  # the workers a changed or ended hold concerns

    def on_event(self, event: Event) -> None:
        state = self.ctx.state
        if state.broker.spend.apply(event, self.ctx.settings.limits):
            self._changed()
        elif (notice := event.payload_as(BudgetNotice)) is not None:
            key = f"{notice.scope}:{notice.period}"
            if key not in state.budget_notices:
                state.budget_notices = [*state.budget_notices[-49:], key]
        elif event.role == "user" and event.channel in OWNER_CHANNELS \
                and (message := event.payload_as(Message)) is not None and message.imported is None:
            state.owner_channel = event.channel

    def _changed(self) -> None:
        self.wake.set()
        for wake in self.wakes:
            wake.set()

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        limits = self.ctx.settings.limits
        while not self.ctx.stop.is_set():
            self.wake.clear()
            now = utcnow()
            spend = self.ctx.state.broker.spend
            found = [spend.over(now, limits), *(spend.hold(now, limits, p) for p in sorted(BACKGROUND))]
            holds = list({f"{h.scope}:{h.period}": h for h in found if h is not None}.values())
            for hold in holds:
                if f"{hold.scope}:{hold.period}" not in self.ctx.state.budget_notices:
                    await self.notify(hold, now)
            until = min((h.until for h in holds), default=None)
            delay = None if until is None else max((until - utcnow()).total_seconds(), 0.0) + 0.01
            try:
                await asyncio.wait_for(self.wake.wait(), delay)
            except TimeoutError:
                self._changed()  # a hold ended: the workers look again

    async def answer(self, _req: BudgetRequest) -> BudgetReply:
        """``inner.cmd.budget``: the lines, what is spent and left, and whether background work waits."""
        settings, spend, now = self.ctx.settings, self.ctx.state.broker.spend, utcnow()
        limits = settings.limits
        held = spend.hold(now, limits, "activation")
        return BudgetReply(
            daily=_line(limits.daily, spend.spent_day(now, limits.periods)),
            monthly=_line(limits.monthly, spend.spent_month(now, limits.periods)),
            timezone=settings.owner_timezone, background_held=held is not None,
            held_reason=held.reason if held else None, held_until=held.until.isoformat() if held else None,
            hard_stop_owner=settings.budget_hard_stop_owner,
        )

    async def notify(self, hold: Hold, now: datetime) -> None:
        settings, state = self.ctx.settings, self.ctx.state
        key = f"{hold.scope}:{hold.period}"
        spend, limits = state.broker.spend, settings.limits
        zone = limits.periods.zone
        owner = ("Your own messages are refused until then (BUDGET_HARD_STOP_OWNER)."
                 if settings.budget_hard_stop_owner else "Your own messages still get answers.")
        text = (f"Delegate: {'budget reached' if hold.reason == 'budget_usd' else 'runaway guard tripped'}: "
                f"{hold.detail}. Today ${spend.spent_day(now, limits.periods):.2f}"
                f"{_of(limits.daily)}, this month ${spend.spent_month(now, limits.periods):.2f}{_of(limits.monthly)}. "
                f"Background work (activations, tasks, memory) waits until "
                f"{hold.until.astimezone(zone):%Y-%m-%d %H:%M} {zone.key}. {owner}")
        channel: Literal["sms", "email", "timeline"] = (
            "sms" if state.owner_channel == "sms" else "email" if state.owner_channel == "email" else "timeline")
        outbox_id = derived_id("budget-notice-out", key) if channel != "timeline" else None
        if channel == "sms":
            assert outbox_id is not None
            await self._publish(topics.SMS_OUT, OutboundSms(id=outbox_id, text=text, origin="activation"), outbox_id)
        elif channel == "email":
            assert outbox_id is not None
            message = OutboundEmail(id=outbox_id, subject="Delegate: spend line reached", text=text,
                                    origin="activation")
            await self._publish(topics.EMAIL_OUT, message, outbox_id)
        event = make_event(
            BudgetNotice(
                reason=hold.reason, scope=hold.scope, period=hold.period, detail=hold.detail,
                spent_day_usd=spend.spent_day(now, limits.periods),
                spent_month_usd=spend.spent_month(now, limits.periods),
                daily_limit_usd=limits.daily, monthly_limit_usd=limits.monthly, until=hold.until,
                channel=channel, outbox_id=outbox_id,
            ),
            conversation_id=state.current_conversation_id, span_id=None, channel="inner",
            id=derived_id("budget.notice", key), ts=now,
        )
        await self._publish(topics.ledger_append("inner-plane"), event, None)
        state.budget_notices = [*state.budget_notices[-49:], key]
        await self.ctx.persist()
        log.warning("told the owner (%s): %s", channel, text)

    async def _publish(self, topic: Topic[M], message: M, msg_id: str | None) -> None:
        async for attempt in retrying(
            retry_on=BusUnavailable, stop=self.ctx.stop, initial=0.5, maximum=10.0,
            what=f"budget notice on {topic.subject}",
        ):
            with attempt:
                await self.ctx.bus.publish(topic, message, msg_id=msg_id)


def background_hold(ctx: Context, purpose: str) -> Hold | None:
    """Why background work of ``purpose`` waits now (memory, capsule ask before a model call)."""
    return ctx.state.broker.spend.hold(utcnow(), ctx.settings.limits, purpose)


async def wait_out(ctx: Context, hold: Hold, wake: asyncio.Event, what: str) -> None:
    """Sleep until the hold ends or something changes (the work stays queued in the state)."""
    log.info("%s waits: %s (until %s)", what, hold.detail, hold.until.isoformat())
    delay = max((hold.until - utcnow()).total_seconds(), 0.0) + 0.01
    try:
        await asyncio.wait_for(wake.wait(), delay)
    except TimeoutError:
        pass


def _line(limit: float | None, spent: float) -> BudgetLine:
    return BudgetLine(limit_usd=limit, spent_usd=round(spent, 6),
                      left_usd=None if limit is None else round(max(limit - spent, 0.0), 6))


def _of(limit: float | None) -> str:
    return "" if limit is None else f" of ${limit:.2f}"
