"""The owner's memory over HTTP against the real gateway, ledger and memory service:
search (facts, episodes and messages together), the facts with their history, an edit and a
forget that are events, a correction that retires the old fact, and the errors at the edge."""

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.memory.builders import History
from tests.memory.test_service import commit, indexed_through
from tests.support.system import System, module_system, probe_bus

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    env = {"MEMORY_RESYNC_SECONDS": "1"}
    with module_system(tmp_path_factory.mktemp("memory-api"), request, "ledger", "memory", "gateway",
                       env=env, separate=("memory",)) as system:
        yield system


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


async def search(http: httpx.AsyncClient, q: str, limit: int = 10) -> list[dict[str, Any]]:
    reply = await http.get("/api/memory/search", params={"q": q, "limit": limit})
    assert reply.status_code == 200, reply.text
    results: list[dict[str, Any]] = reply.json()["results"]
    return results


async def fact(http: httpx.AsyncClient, fact_id: str) -> dict[str, Any]:
    facts = (await http.get("/api/memories")).json()["facts"]
    found: dict[str, Any] = next(f for f in facts if f["id"] == fact_id)
    return found


async def test_search_finds_facts_episodes_and_messages_with_their_sources(http: httpx.AsyncClient, bus: Bus) -> None:
    h = History(seq=False)
    said = h.say("My sister lives in Lisbon, near the Gulbenkian garden.", channel="sms")
    answer = h.say("Noted: Lisbon, by the Gulbenkian.", role="assistant", parent_id=said.id, channel="sms")
    sister = h.fact("My sister lives in Lisbon.", [said])
    h.episode("The owner told me by SMS where the sister lives: Lisbon, Gulbenkian garden.", [said, answer])
    await indexed_through(bus, await commit(bus, h.events))

    results = await search(http, "where does my sister live Gulbenkian Lisbon")
    kinds = {r["kind"] for r in results}
    assert kinds == {"fact", "episode", "message"}
    for r in results:
        assert set(r) >= {"kind", "text", "score", "ts", "event_ids", "refs"}
    top_fact = next(r for r in results if r["kind"] == "fact")
    assert top_fact["text"] == "My sister lives in Lisbon." and top_fact["event_ids"] == [said.id]
    assert top_fact["id"] == sister.payload["fact_id"]
    episode = next(r for r in results if r["kind"] == "episode")
    assert set(episode["event_ids"]) >= {said.id, answer.id}  # opens back into the exact turns
    scores = [r["score"] for r in results]
    assert scores == sorted(scores, reverse=True)


async def test_a_correction_retires_the_old_fact_which_stays_visible_only_as_history(
    http: httpx.AsyncClient, bus: Bus
) -> None:
    h = History(seq=False)
    first = h.say("My brother works at the Porto shipyard.")
    old = h.fact("My brother works at the Porto shipyard.", [first], valid_at=utcnow() - timedelta(days=30))
    fix = h.say("Actually my brother now works at the Aveiro shipyard.")
    new = h.fact("My brother works at the Aveiro shipyard.", [fix], supersedes=(old.payload["fact_id"],))
    await commit(bus, h.events[:2])  # the old fact is committed before the fact that retires it
    await indexed_through(bus, await commit(bus, h.events[2:]))

    results = [r for r in await search(http, "brother shipyard works") if r["kind"] == "fact"]
    assert [r["id"] for r in results] == [new.payload["fact_id"]]
    assert results[0]["event_ids"] == [fix.id]

    retired = await fact(http, old.payload["fact_id"])
    assert retired["status"] == "superseded" and retired["superseded_by"] == new.payload["fact_id"]
    assert retired["invalid_at"] == (await fact(http, new.payload["fact_id"]))["valid_at"]
    assert [c["kind"] for c in retired["history"]] == ["superseded", "memory.fact.added"]  # newest first
    current_only = (await http.get("/api/memories", params={"include_retired": "false"})).json()["facts"]
    assert old.payload["fact_id"] not in {f["id"] for f in current_only}


async def test_edit_and_forget_are_events_and_a_forgotten_fact_is_never_found_again(
    http: httpx.AsyncClient, bus: Bus
) -> None:
    h = History(seq=False)
    said = h.say("I keep my spare key under the blue geranium pot.")
    added = h.fact("The spare key is under the blue geranium pot.", [said])
    await indexed_through(bus, await commit(bus, h.events))
    fact_id = added.payload["fact_id"]

    edited = await http.patch(f"/api/memories/{fact_id}", json={"text": "The spare key is under the red geranium pot.",
                                                                  "type": "fact"})
    assert edited.status_code == 200, edited.text
    assert edited.json()["fact"]["text"] == "The spare key is under the red geranium pot."
    history = (await fact(http, fact_id))["history"]
    assert (history[0]["kind"], history[0]["text"]) == (
        "memory.fact.edited", "The spare key is under the blue geranium pot.")

    key = {"Idempotency-Key": f"forget-{new_id()}"}
    forgot = await http.delete(f"/api/memories/{fact_id}", headers=key)
    assert forgot.status_code == 200 and forgot.json()["fact"]["status"] == "forgotten"
    again = await http.delete(f"/api/memories/{fact_id}", headers=key)
    assert again.status_code == 200 and again.json()["fact"]["status"] == "forgotten"
    changes = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["memory.fact.forgotten"], limit=5000))
    assert [e.payload["fact_id"] for e in changes.events].count(fact_id) == 1

    assert [r for r in await search(http, "spare key geranium pot") if r["kind"] == "fact"] == []
    conflict = await http.patch(f"/api/memories/{fact_id}", json={"text": "back again"})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "conflict"


async def test_the_edge_refuses_bad_requests(running: System, http: httpx.AsyncClient) -> None:
    assert (await http.get("/api/memory/search", params={"q": "  "})).status_code == 400
    assert (await http.get("/api/memory/search", params={"q": "x", "limit": "0"})).status_code == 400
    assert (await http.get("/api/memory/search", params={"q": "x", "limit": "many"})).status_code == 400
    assert (await http.get("/api/memory/search", params={"q": "x" * 4001})).status_code == 400
    assert (await http.patch("/api/memories/no-such-fact", json={"text": "x"})).status_code == 404
    assert (await http.delete("/api/memories/" + "x" * 65)).status_code == 404
    assert (await http.patch("/api/memories/whatever", json={"text": ""})).status_code in (400, 422)
    assert (await http.patch("/api/memories/whatever", json={"text": "x", "colour": "red"})).status_code in (400, 422)
    assert (await http.get("/api/memories", params={"include_retired": "perhaps"})).status_code == 400
    async with httpx.AsyncClient(base_url=running.http, timeout=10) as anonymous:
        assert (await anonymous.get("/api/memory/search", params={"q": "x"})).status_code == 401
        assert (await anonymous.delete("/api/memories/x")).status_code == 401


async def test_without_the_memory_service_the_routes_say_so(running: System, http: httpx.AsyncClient) -> None:
    running.kill("memory")
    try:
        reply = await http.get("/api/memory/search", params={"q": "anything"})
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "memory_unavailable"
        assert (await http.get("/api/memories")).status_code == 503
    finally:
        running.restart("memory")
