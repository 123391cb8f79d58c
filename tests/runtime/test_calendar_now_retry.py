"""With the pollers' calendar failing, a turn asks again only after a pause: every turn would
otherwise wait its bound (0.3 s) for an answer that is not coming."""

import json
from datetime import UTC, datetime

import pytest
from nats.aio.msg import Msg

from delegate.contracts import topics
from delegate.runtime.bus import Bus
from delegate.runtime.calendar_now import CalendarNow

pytestmark = pytest.mark.integration


async def test_a_failed_ask_is_not_repeated_by_the_next_turn(bus: Bus) -> None:
    asked: list[bytes] = []

    async def failing(msg: Msg) -> None:
        asked.append(msg.data)
        await msg.respond(json.dumps({"error": {"code": "unavailable", "message": "no calendar"}}).encode())

    await bus.nc.subscribe(topics.POLLERS_CALENDAR.subject, cb=failing)
    await bus.nc.flush()
    now = CalendarNow(bus, "Europe/Berlin", enabled=True)
    at = datetime(2026, 12, 7, 13, 0, tzinfo=UTC)
    assert await now.ready(at, timeout=5.0) is None
    assert await now.ready(at, timeout=5.0) is None
    assert len(asked) == 1
