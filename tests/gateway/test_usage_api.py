"""``GET /api/usage`` and ``GET /api/usage/calls`` over HTTP (issue #29 item 4), real ledger and
gateway: each grouping, the owner's days (OWNER_TIMEZONE) for the default 30 days and for
``from``/``to`` given as days or instants, and the refusals of what is not a range or a group."""

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Channel, Event, ModelUsage, UsagePurpose, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import GetRequest
from tests.support.system import System, module_system, owner_http, probe_bus
from tests.support.waiting import eventually

from .helpers import PATIENT_S

pytestmark = [pytest.mark.integration]

ZONE = ZoneInfo("America/New_York")
TODAY = datetime.now(ZONE).date()
D = TODAY - timedelta(days=3)


def local(day: date, hour: int, minute: int = 0) -> datetime:
    return datetime.combine(day, time(hour, minute), ZONE)


def call(
    purpose: UsagePurpose,
    at: datetime,
    cost: float | None,
    *,
    channel: Channel = "inner",
    span: str | None = None,
    model: str = "gpt-5.5",
) -> Event:
    payload = ModelUsage(
        model=model,
        purpose=purpose,
        cause_id=span,
        input_tokens=1000,
        cached_tokens=100,
        output_tokens=50,
        cost_usd=cost,
    )
    return make_event(
        payload, conversation_id="c-usage", span_id=span, channel=channel, id=new_id(), ts=at.astimezone(UTC)
    )


SEEDED = [
    call("owner_turn", local(D, 12), 0.01, channel="text"),
    call("owner_turn", local(D, 12, 5), 0.02, channel="sms"),
    call("activation", local(D, 13), 0.05, span="act-h"),
    call("web_search", local(D, 13, 1), 0.011, span="act-h"),
    call("capsule", local(D, 14), None, model="local-llm"),  # unpriced: unknown, not $0
    call("task_step", local(D - timedelta(days=5), 9), 0.2, span="task-h"),
    # 23:30 in New York is 04:30 UTC the next day: the owner's day D-1, not D.
    call("owner_turn", local(D - timedelta(days=1), 23, 30), 0.04, channel="text"),
    call("owner_turn", local(TODAY - timedelta(days=40), 12), 9.0, channel="text"),  # older than 30 days
]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    with module_system(
        tmp_path_factory.mktemp("usage-api"), request, "ledger", "gateway", env={"OWNER_TIMEZONE": ZONE.key}
    ) as system:
        yield system


@pytest.fixture
async def seeded(running: System) -> list[Event]:
    """The seeded calls, committed (each test publishes them again: the ledger stores them once)."""
    async with probe_bus(running) as bus:
        for event in SEEDED:
            await bus.publish(topics.ledger_append("test"), event, msg_id=event.id)

        async def stored() -> bool:
            reply = await bus.request(topics.LEDGER_GET, GetRequest(id=SEEDED[-1].id))
            return reply.event is not None and reply.event.seq is not None

        await eventually(stored, "the seeded usage committed")
    return SEEDED


@pytest.fixture
async def http(running: System, seeded: list[Event]) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=30) as client:
        yield client


async def usage(http: httpx.AsyncClient, **params: str) -> dict[str, Any]:
    response = await http.get("/api/usage", params=params)
    assert response.status_code == 200, response.text
    return dict(response.json())


def rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in body["rows"]}


async def test_the_last_30_days_by_the_owners_day(http: httpx.AsyncClient) -> None:
    body = await usage(http)
    assert (body["group"], body["timezone"], body["currency"]) == ("day", ZONE.key, "USD")
    days = rows(body)
    assert set(days) == {D.isoformat(), (D - timedelta(days=1)).isoformat(), (D - timedelta(days=5)).isoformat()}
    assert days[(D - timedelta(days=1)).isoformat()]["cost_usd"] == pytest.approx(0.04)
    day = days[D.isoformat()]
    assert (day["calls"], day["unpriced_calls"]) == (5, 1)
    assert day["cost_usd"] == pytest.approx(0.091)
    assert day["by_purpose"] == pytest.approx(
        {"owner_turn": 0.03, "activation": 0.05, "web_search": 0.011, "capsule": 0.0}
    )
    assert body["unpriced_models"] == ["local-llm"]
    assert [(s["span_id"], s["calls"]) for s in body["top"]] == [("task-h", 1), ("act-h", 2)]
    assert body["top"][1]["cost_usd"] == pytest.approx(0.061)


async def test_grouped_by_purpose_channel_and_model(http: httpx.AsyncClient) -> None:
    purposes = rows(await usage(http, group="purpose"))
    assert {k: (r["calls"], round(r["cost_usd"], 6)) for k, r in purposes.items()} == {
        "owner_turn": (3, 0.07),
        "activation": (1, 0.05),
        "web_search": (1, 0.011),
        "task_step": (1, 0.2),
        "capsule": (1, 0.0),
    }
    assert purposes["capsule"]["unpriced_calls"] == 1
    assert purposes["owner_turn"]["input_tokens"] == 3000 and purposes["owner_turn"]["cached_tokens"] == 300
    channels = rows(await usage(http, group="channel"))
    assert {k: r["calls"] for k, r in channels.items()} == {"text": 2, "sms": 1, "inner": 4}
    models = rows(await usage(http, group="model"))
    assert {k: r["calls"] for k, r in models.items()} == {"gpt-5.5": 6, "local-llm": 1}


async def test_from_and_to_as_owner_days_or_instants(http: httpx.AsyncClient) -> None:
    one_day = await usage(http, group="purpose", **{"from": D.isoformat(), "to": D.isoformat()})
    assert sum(r["calls"] for r in one_day["rows"]) == 5
    assert one_day["from"] == local(D, 0).isoformat() and one_day["to"] == local(D + timedelta(days=1), 0).isoformat()

    # [12:00, 13:00) New York time on D: the two owner turns, not the activation at 13:00.
    hour = await usage(http, group="purpose", **{"from": local(D, 12).isoformat(), "to": local(D, 13).isoformat()})
    assert {k: r["calls"] for k, r in rows(hour).items()} == {"owner_turn": 2}
    utc = await usage(
        http,
        group="channel",
        **{
            "from": local(D, 12).astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "to": local(D, 13).astimezone(UTC).isoformat().replace("+00:00", "Z"),
        },
    )
    assert {k: r["calls"] for k, r in rows(utc).items()} == {"text": 1, "sms": 1}

    # Far enough back, the 40-day-old turn is there too.
    old = TODAY - timedelta(days=45)
    everything = await usage(http, group="model", **{"from": old.isoformat(), "to": TODAY.isoformat()})
    assert rows(everything)["gpt-5.5"]["cost_usd"] == pytest.approx(9.331)


@pytest.mark.parametrize(
    "params",
    [
        {"group": "week"},
        {"from": "yesterday"},
        {"from": "2026-12-01T10:00:00"},  # an instant without its offset
        {"from": "2026-12-05", "to": "2026-12-01"},
        {"from": "2020-01-01", "to": "2026-01-01"},  # more than two years at once
    ],
)
async def test_what_is_not_a_range_or_a_group_is_refused(http: httpx.AsyncClient, params: dict[str, str]) -> None:
    response = await http.get("/api/usage", params=params)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_request"


async def test_a_runs_calls_oldest_first_and_the_owners_token_is_needed(
    running: System, http: httpx.AsyncClient
) -> None:
    response = await http.get("/api/usage/calls", params={"span_id": "act-h"})
    assert response.status_code == 200, response.text
    calls = response.json()["calls"]
    assert [(c["purpose"], c["cost_usd"], c["channel"]) for c in calls] == [
        ("activation", 0.05, "inner"),
        ("web_search", 0.011, "inner"),
    ]
    assert (await http.get("/api/usage/calls")).status_code == 400
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=running.http) as stranger:
        for path in ("/api/usage", "/api/usage/calls?span_id=act-h", "/api/usage/budget"):
            assert (await stranger.get(path)).status_code == 401, path
