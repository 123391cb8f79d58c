"""``GET /api/reminders`` and ``DELETE /api/reminders/{id}`` against real gateway, ledger, inner plane.

Reminders are set the way the agent's tools set them (``inner.cmd.reminders``); the HTTP API
lists the upcoming ones and cancels. The last test stops the inner plane to see the 503.
"""

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import httpx
import pytest

from delegate.contracts.ids import utcnow
from delegate.contracts.reminders import ReminderSpec
from delegate.runtime.bus import Bus
from tests.inner_plane.reminders_rig import ask, ask_when_ready
from tests.support.system import System, module_system, probe_bus

pytestmark = [pytest.mark.integration]

@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    with module_system(
        tmp_path_factory.mktemp("reminders-api"), request, "ledger", "inner-plane", "gateway",
        env={"OWNER_TIMEZONE": "UTC"}, separate=("inner-plane",),
    ) as system:
        yield system


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


async def test_upcoming_reminders_are_listed_soonest_first_and_cancelled_by_delete(
    http: httpx.AsyncClient, bus: Bus
) -> None:
    later = utcnow() + timedelta(days=2)
    sooner = utcnow() + timedelta(hours=3)
    a = (await ask_when_ready(bus, op="set", spec=ReminderSpec(text="later", at=later))).reminders[0]
    b = (await ask(bus, op="set", spec=ReminderSpec(text="sooner", at=sooner))).reminders[0]
    c = (await ask(bus, op="set", spec=ReminderSpec(text="weekdays", cron="0 7 * * 1-5"))).reminders[0]

    listed = await http.get("/api/reminders")
    assert listed.status_code == 200, listed.text
    upcoming = listed.json()["reminders"]
    mine = [r for r in upcoming if r["id"] in (a.id, b.id, c.id)]
    by_due = sorted(mine, key=lambda r: r["next_due"])
    assert mine == by_due and {r["id"] for r in mine} == {a.id, b.id, c.id}
    first = next(r for r in mine if r["id"] == b.id)
    assert (first["spec"]["text"], first["status"], first["revision"]) == ("sooner", "active", 1)

    gone = await http.delete(f"/api/reminders/{b.id}")
    assert gone.status_code == 200, gone.text
    assert gone.json()["reminder"]["status"] == "cancelled"
    assert b.id not in [r["id"] for r in (await http.get("/api/reminders")).json()["reminders"]]
    with_done = (await http.get("/api/reminders", params={"include_done": "true"})).json()["reminders"]
    assert [r["status"] for r in with_done if r["id"] == b.id] == ["cancelled"]

    again = await http.delete(f"/api/reminders/{b.id}")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    unknown = await http.delete("/api/reminders/no-such-reminder")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    bad = await http.get("/api/reminders", params={"include_done": "perhaps"})
    assert bad.status_code == 400 and "include_done" in bad.json()["error"]["message"]


async def test_the_reminder_routes_need_the_owner_token(running: System) -> None:
    async with httpx.AsyncClient(base_url=running.http, timeout=10) as anonymous:
        for method, path in (("GET", "/api/reminders"), ("DELETE", "/api/reminders/anything")):
            reply = await anonymous.request(method, path)
            assert reply.status_code == 401, (method, reply.text)
            assert reply.json()["error"]["code"] == "unauthorized"
        wrong = await anonymous.get("/api/reminders", headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401


async def test_503_while_the_inner_plane_does_not_answer(running: System, http: httpx.AsyncClient) -> None:
    running.procs["inner-plane"].stop()
    for reply in (await http.get("/api/reminders"), await http.delete("/api/reminders/some-id")):
        assert reply.status_code == 503, reply.text
        assert reply.json()["error"]["code"] == "inner_plane_unavailable"
