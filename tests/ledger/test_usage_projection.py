"""The usage projection: model.usage totals per hour and per span, kept in the writing transaction
on every backend, answered grouped by day (the owner's), purpose, channel or model, and served on
ledger.cmd.usage."""

from datetime import UTC, datetime, timedelta

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Channel, Event, ModelUsage, UsagePurpose, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.usage import UsageRequest
from delegate.ledger.store import LedgerStore
from tests.support.waiting import eventually

from .builders import message
from .conftest import Running

DAY = datetime(2026, 11, 30, tzinfo=UTC)


def usage(purpose: UsagePurpose, ts: datetime, cost: float | None, *, channel: Channel = "text",
          span: str | None = None, model: str = "gpt-5.5", tokens: int = 100) -> Event:
    payload = ModelUsage(model=model, purpose=purpose, cause_id=span, input_tokens=tokens, cached_tokens=tokens // 2,
                         output_tokens=tokens // 4, cost_usd=cost)
    return make_event(payload, conversation_id="c1", span_id=span, channel=channel, id=new_id(), ts=ts)


def request(group: str = "day", days: int = 30, **fields: object) -> UsageRequest:
    return UsageRequest(from_ts=DAY - timedelta(days=days - 1), to_ts=DAY + timedelta(days=1),
                        group=group, **fields)


async def test_totals_grouped_each_way_count_every_call_once(store: LedgerStore) -> None:
    events = [
        usage("owner_turn", DAY + timedelta(hours=9), 0.01),
        usage("owner_turn", DAY + timedelta(hours=9, minutes=5), 0.02, channel="sms"),
        usage("activation", DAY + timedelta(hours=10), 0.05, span="act-1"),
        usage("web_search", DAY + timedelta(hours=10, minutes=1), 0.011, span="act-1"),
        usage("task_step", DAY - timedelta(days=2), 0.20, span="task-1"),
        usage("task_step", DAY - timedelta(days=2, hours=-1), 0.30, span="task-1"),
        usage("capsule", DAY + timedelta(hours=3), None, model="my-local-model"),  # unpriced
        usage("owner_turn", DAY - timedelta(days=40), 9.0),  # out of the 30 days
    ]
    await store.append([message("unrelated", t=1), *events[:3]])
    await store.append(events[3:])
    await store.append(events[3:5])  # a redelivery adds nothing

    by_day = await store.usage(request())
    assert [r.key for r in by_day.rows] == ["2026-11-28", "2026-11-30"]
    today = by_day.rows[1]
    assert today.calls == 5 and today.unpriced_calls == 1
    assert today.cost_usd == pytest.approx(0.091)
    assert today.input_tokens == 500 and today.cached_tokens == 250 and today.output_tokens == 125
    assert today.by_purpose == pytest.approx(
        {"owner_turn": 0.03, "activation": 0.05, "web_search": 0.011, "capsule": 0.0})
    assert by_day.unpriced_models == ["my-local-model"]

    by_purpose = {r.key: r for r in (await store.usage(request("purpose"))).rows}
    assert by_purpose["task_step"].cost_usd == pytest.approx(0.5) and by_purpose["task_step"].calls == 2
    assert set(by_purpose) == {"owner_turn", "activation", "web_search", "task_step", "capsule"}
    by_channel = {r.key: r.calls for r in (await store.usage(request("channel"))).rows}
    assert by_channel == {"text": 6, "sms": 1}
    by_model = {r.key: r.calls for r in (await store.usage(request("model"))).rows}
    assert by_model == {"gpt-5.5": 6, "my-local-model": 1}

    # The most expensive runs: the task, then the activation with the search it made.
    top = (await store.usage(request())).top
    assert [(s.span_id, s.purpose, s.calls) for s in top] == [("task-1", "task_step", 2), ("act-1", "activation", 2)]
    assert top[1].cost_usd == pytest.approx(0.061)


async def test_days_are_the_owners(store: LedgerStore) -> None:
    # 23:30 UTC on the 29th is the 30th in Tokyo, still the 29th in New York.
    await store.append([usage("owner_turn", DAY - timedelta(minutes=30), 0.04)])
    tokyo = await store.usage(request(timezone="Asia/Tokyo"))
    new_york = await store.usage(request(timezone="America/New_York"))
    assert [r.key for r in tokyo.rows] == ["2026-11-30"]
    assert [r.key for r in new_york.rows] == ["2026-11-29"]


async def test_served_on_the_bus(ledger: Running) -> None:
    event = usage("activation", DAY + timedelta(hours=1), 0.25, span="act-9")
    await ledger.bus.publish(topics.ledger_append("inner-plane"), event, msg_id=event.id)
    await eventually(lambda: ledger.announced(event.id), "the usage event committed")
    reply = await ledger.bus.request(topics.LEDGER_USAGE, request("purpose"))
    assert [(r.key, r.calls, r.cost_usd) for r in reply.rows] == [("activation", 1, 0.25)]
    assert [s.span_id for s in reply.top] == ["act-9"]
