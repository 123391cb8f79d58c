"""``POST /api/import`` and ``GET /api/import/{id}`` against the real gateway, ledger, memory
service and the OpenAI stand-in (as the model of the memory service's per-turn extraction).

A 10,000-line NDJSON body round-trips into past conversations with its original timestamps,
is searchable with its refs, runs no model call, and a retried POST writes nothing twice; a
body with bad lines is refused whole with their line numbers; ChatGPT's export is taken on
its current branch; the edge refuses what is not an import.
"""

import json
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system, owner_http, probe_bus
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

NDJSON = {"Content-Type": "application/x-ndjson"}
START = datetime(2023, 5, 8, 13, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    env = {"OPENAI_API_KEY": "offline-standin", "OPENAI_BASE_URL": module_standin.base_url,
           "MEMORY_RESYNC_SECONDS": "1", "MEMORY_EXTRACT_WAIT_S": "0.5"}
    root = tmp_path_factory.mktemp("import-api")
    with module_system(root, request, "ledger", "memory", "gateway", env=env, separate=("ledger", "gateway"),
                       extra_log=module_standin.log_text) as system:
        yield system


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=60) as client:
        yield client


def ndjson(lines: list[Any]) -> bytes:
    return "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines).encode()


def dialog(n: int, tag: str) -> list[dict[str, Any]]:
    """``n`` lines in conversations of 50 turns, two speakers, a minute apart."""
    lines = []
    for i in range(n):
        lines.append({
            "ts": (START + timedelta(minutes=i)).isoformat(),
            "role": "user" if i % 2 == 0 else "assistant",
            "text": f"{tag} line {i}: the harbour crane number {i} was painted teal",
            "speaker": "Caroline" if i % 2 == 0 else "Melanie",
            "conversation": f"{tag}-session-{i // 50}",
            "ref": f"{tag}:D{i // 50}:{i % 50}",
        })
    return lines


async def finished(http: httpx.AsyncClient, import_id: str, timeout: float = 120.0) -> dict[str, Any]:
    async def status() -> dict[str, Any] | None:
        reply = await http.get(f"/api/import/{import_id}")
        body: dict[str, Any] = reply.json()
        return body if reply.status_code == 200 and body["status"] != "running" else None

    result: dict[str, Any] = await eventually(status, f"import {import_id} to finish", timeout)
    return result


async def ledger_mark(bus: Bus) -> int:
    """The ledger's newest seq now: what an import posted after this commits comes after it."""
    return (await bus.request(topics.LEDGER_QUERY, QueryRequest(limit=1))).last_seq


async def imported_events(bus: Bus, import_id: str, after_seq: int) -> list[Event]:
    """The events of one import, read from ``after_seq`` (a ``ledger_mark`` taken before it was
    posted) on: reading the whole ledger each time, past this module's 30,000 imported lines,
    took 10 to 17 s per call on a loaded machine."""
    events: list[Event] = []
    after = after_seq
    while True:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, limit=5000))
        events += [e for e in reply.events if (e.payload.get("imported") or {}).get("import_id") == import_id]
        if not reply.more or not reply.events:
            return events
        after = reply.events[-1].seq or after


async def conversation_events(bus: Bus, conversation_ids: set[str]) -> list[Event]:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(
        kinds=["conversation.opened", "span.opened", "span.closed", "conversation.ended"], limit=5000))
    return [e for e in reply.events if e.conversation_id in conversation_ids]


async def test_ten_thousand_lines_round_trip_into_past_conversations(
    http: httpx.AsyncClient, bus: Bus, module_standin: StandinProcess
) -> None:
    lines = dialog(10_000, "teal")
    requests_before = len(module_standin.response_requests())
    mark = await ledger_mark(bus)
    reply = await http.post("/api/import", content=ndjson(lines), headers={**NDJSON, "Idempotency-Key": "teal-1"})
    assert reply.status_code == 202, reply.text
    started = reply.json()
    import_id = started["import_id"]
    assert (started["lines"], started["conversations"]) == (10_000, 200)

    status = await finished(http, import_id)
    assert status["status"] == "done", status
    assert status["indexed"] == 10_000 and status["errors"] == []
    assert status["events"] == status["total"] == 10_000 + 200 * 4  # each conversation opened, spanned, ended

    events = await imported_events(bus, import_id, mark)
    messages = [e for e in events if e.kind == "message"]
    assert len(messages) == len({e.id for e in messages}) == 10_000
    by_ref = {e.payload["imported"]["ref"]: e for e in messages}
    for line in (lines[0], lines[4321], lines[-1]):
        event = by_ref[line["ref"]]
        assert event.ts == datetime.fromisoformat(line["ts"]) and event.payload["text"] == line["text"]
        assert event.role == line["role"] and event.payload["imported"]["speaker"] == line["speaker"]
    # each source conversation is one past conversation, opened and ended around its messages
    # None left out only for its type: the 200 x 50 below then count all 10,000 messages
    per_conversation = Counter(e.conversation_id for e in messages if e.conversation_id is not None)
    assert len(per_conversation) == 200 and set(per_conversation.values()) == {50}
    framing = await conversation_events(bus, set(per_conversation))
    for kind in ("conversation.opened", "span.opened", "span.closed", "conversation.ended"):
        assert Counter(e.conversation_id for e in framing if e.kind == kind) == Counter(set(per_conversation)), kind

    found = (await http.get("/api/memory/search", params={"q": "harbour crane 4321 teal", "limit": 5})).json()
    top = found["results"][0]
    assert top["kind"] == "message" and top["refs"] == ["teal:D86:21"]
    assert top["event_ids"] == [by_ref["teal:D86:21"].id] and top["ts"].startswith("2023-05-11")

    # the same POST again (its answer lost): the same import, nothing written twice
    again = await http.post("/api/import", content=ndjson(lines), headers={**NDJSON, "Idempotency-Key": "teal-1"})
    assert again.status_code == 202 and again.json()["import_id"] == import_id
    assert (await finished(http, import_id))["status"] == "done"
    assert len([e for e in await imported_events(bus, import_id, mark) if e.kind == "message"]) == 10_000

    # no model turn ran for any of it: imported turns are history, not extraction work
    extraction = [r for r in module_standin.response_requests()[requests_before:] if "teal" in json.dumps(r["body"])]
    assert extraction == []


async def test_the_timeline_pages_back_into_an_import_in_order(http: httpx.AsyncClient) -> None:
    lines = dialog(120, "paging")
    reply = await http.post("/api/import", content=ndjson(lines), headers=NDJSON)
    assert reply.status_code == 202, reply.text
    assert (await finished(http, reply.json()["import_id"]))["status"] == "done"

    seen: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 500, **({"before": cursor} if cursor else {})}
        page = (await http.get("/api/timeline", params=params)).json()
        seen = page["events"] + seen
        cursor = page.get("cursor")
        if not cursor:
            break
    ours = [e for e in seen if e["kind"] == "message" and e["payload"]["text"].startswith("paging line")]
    assert [e["payload"]["text"] for e in ours] == [line["text"] for line in lines]
    keys = [(e["ts"], e["id"]) for e in seen]
    assert keys == sorted(keys)  # one timeline order, imported history inside it


async def test_bad_lines_refuse_the_whole_body_with_their_line_numbers(http: httpx.AsyncClient, bus: Bus) -> None:
    good = dialog(6, "refused")
    body = [good[0], "{not json", good[1], {**good[2], "role": "robot"}, "", good[3], {"ts": "2023-05-08", "role":
            "user", "text": "no zone"}, {**good[4], "text": "   "}, {**good[5], "extra": 1}]
    mark = await ledger_mark(bus)
    reply = await http.post("/api/import", content=ndjson(body), headers=NDJSON)
    assert reply.status_code == 422, reply.text
    refusal = reply.json()
    assert refusal["error"]["code"] == "bad_lines"
    assert [e["line"] for e in refusal["errors"]] == [2, 4, 7, 8, 9]
    assert "role" in refusal["errors"][1]["message"] and "unknown field" in refusal["errors"][4]["message"]

    status = await finished(http, refusal["import_id"])
    assert status["status"] == "failed" and [e["line"] for e in status["errors"]] == [2, 4, 7, 8, 9]
    assert await imported_events(bus, refusal["import_id"], mark) == []  # not one line of it
    found = (await http.get("/api/memory/search", params={"q": "refused line crane"})).json()["results"]
    assert [r for r in found if r["text"].startswith("refused")] == []


async def test_a_chatgpt_export_is_imported_on_its_current_branch(http: httpx.AsyncClient, bus: Bus) -> None:
    t = 1_700_000_000.0

    def node(node_id: str, parent: str | None, role: str, text: str, at: float, children: list[str]) -> dict[str, Any]:
        message = {"id": node_id, "author": {"role": role}, "create_time": at,
                   "content": {"content_type": "text", "parts": [text]}}
        return {"id": node_id, "parent": parent, "children": children, "message": message}

    export = [{
        "id": "conv-1", "title": "Boats", "create_time": t, "current_node": "a2",
        "mapping": {
            "root": {"id": "root", "parent": None, "children": ["u1"], "message": None},
            "u1": node("u1", "root", "user", "Which boat should I buy for the Tavira lagoon?", t + 1, ["a1", "a2"]),
            "a1": node("a1", "u1", "assistant", "An abandoned answer about kayaks.", t + 2, []),
            "a2": node("a2", "u1", "assistant", "A small flat-bottomed skiff suits the Tavira lagoon.", t + 3, []),
        },
    }]
    mark = await ledger_mark(bus)
    reply = await http.post("/api/import", json=export)
    assert reply.status_code == 202, reply.text
    assert reply.json()["format"] == "chatgpt"
    import_id = reply.json()["import_id"]
    assert (await finished(http, import_id))["status"] == "done"
    messages = [e for e in await imported_events(bus, import_id, mark) if e.kind == "message"]
    assert [(e.role, e.payload["imported"]["ref"]) for e in messages] == [("user", "u1"), ("assistant", "a2")]
    assert messages[0].ts == datetime.fromtimestamp(t + 1, UTC)
    assert messages[1].parent_id == messages[0].id


async def test_an_import_is_not_done_before_the_ledger_has_committed_it(
    running: System, http: httpx.AsyncClient, bus: Bus
) -> None:
    """Written (acknowledged by JetStream) is not done: done means searchable. It used to say
    done as soon as this gateway had written every event, while memory knew nothing of the
    import yet, and a read of the ledger right after found none of it."""
    ledger = running.procs["ledger"].proc
    assert ledger is not None
    mark = await ledger_mark(bus)
    ledger.send_signal(signal.SIGSTOP)  # the ledger commits nothing until it is continued
    try:
        reply = await http.post("/api/import", content=ndjson(dialog(4, "paused")), headers=NDJSON)
        assert reply.status_code == 202, reply.text
        import_id, events = reply.json()["import_id"], reply.json()["events"]

        async def written() -> dict[str, Any] | None:
            body: dict[str, Any] = (await http.get(f"/api/import/{import_id}")).json()
            return body if body["events"] == events else None

        status = await eventually(written, "this gateway to write every event of the import", 30)
        assert status["status"] == "running" and status["indexed"] == 0, status
    finally:
        ledger.send_signal(signal.SIGCONT)
    assert (await finished(http, import_id))["status"] == "done"
    assert sum(e.kind == "message" for e in await imported_events(bus, import_id, mark)) == 4


async def test_the_edge_refuses_what_is_not_an_import(running: System, http: httpx.AsyncClient) -> None:
    assert (await http.post("/api/import", content=b"", headers=NDJSON)).status_code == 422
    wrong_type = await http.post("/api/import", content=ndjson(dialog(1, "x")), headers={"Content-Type": "text/plain"})
    assert wrong_type.status_code == 415
    unknown = await http.get("/api/import/imp-no-such-import")
    assert unknown.status_code == 404
    assert (await http.get("/api/import/" + "x" * 65)).status_code == 404
    async with httpx.AsyncClient(base_url=running.http, timeout=10) as anonymous:
        assert (await anonymous.post("/api/import", content=ndjson(dialog(1, "x")), headers=NDJSON)).status_code == 401
    deep = ("[" * 5000 + "]" * 5000).encode()
    assert (await http.post("/api/import", content=deep, headers={"Content-Type": "application/json"})).status_code \
        == 422


async def test_a_gateway_killed_mid_import_leaves_whole_conversations_and_the_retry_completes_it(
    running: System, bus: Bus
) -> None:
    lines = dialog(20_000, "killed")
    key = {**NDJSON, "Idempotency-Key": "killed-1"}
    mark = await ledger_mark(bus)
    async with httpx.AsyncClient(base_url=running.http, headers=running.auth(), timeout=60) as http:
        reply = await http.post("/api/import", content=ndjson(lines), headers=key)
        assert reply.status_code == 202, reply.text
        import_id = reply.json()["import_id"]

        async def some_written() -> bool:
            status: dict[str, Any] = (await http.get(f"/api/import/{import_id}")).json()
            return bool(status["status"] == "running" and status["events"] > 0)

        await eventually(some_written, "the import to be under way", 60)
    running.kill("gateway")

    # What the dead gateway left: only whole conversations (atomic batches), never a part of one.
    # The ledger may still be committing a batch it received (its commits need not follow the
    # batches' edges), so this waits for the ledger to settle: a conversation the gateway left
    # cut short would never become whole, and the wait would fail.
    async def settled() -> list[Any] | None:
        partial = [e for e in await imported_events(bus, import_id, mark) if e.kind == "message"]
        return partial if set(Counter(e.conversation_id for e in partial).values()) <= {50} else None

    try:
        partial = await eventually(settled, "the ledger to hold only whole conversations", 30)
        assert len(partial) < 20_000
    finally:
        running.restart("gateway")  # the module's later tests need it, whatever failed here
    async with httpx.AsyncClient(base_url=running.http, headers=running.auth(), timeout=60) as http:
        again = await http.post("/api/import", content=ndjson(lines), headers=key)
        assert again.status_code == 202 and again.json()["import_id"] == import_id
        status = await finished(http, import_id, timeout=180)
    assert status["status"] == "done" and status["indexed"] == 20_000, status
    messages = [e for e in await imported_events(bus, import_id, mark) if e.kind == "message"]
    assert len(messages) == len({e.id for e in messages}) == 20_000
    assert set(Counter(e.conversation_id for e in messages).values()) == {50}


def chatgpt_export(**changes: Any) -> list[dict[str, Any]]:
    """A good one-conversation export, then ``changes`` applied: {"path.to.field": value}."""
    t = 1_700_000_000.0
    conversation: dict[str, Any] = {
        "id": "conv-types", "create_time": t, "current_node": "a1",
        "mapping": {
            "root": {"id": "root", "parent": None, "children": ["u1"], "message": None},
            "u1": {"id": "u1", "parent": "root", "children": ["a1"], "message": {
                "id": "u1", "author": {"role": "user"}, "create_time": t + 1,
                "content": {"content_type": "text", "parts": ["hello"]}}},
            "a1": {"id": "a1", "parent": "u1", "children": [], "message": {
                "id": "a1", "author": {"role": "assistant"}, "create_time": t + 2,
                "content": {"content_type": "text", "parts": ["hi"]}}},
        },
    }
    for path, value in changes.items():
        *parents, last = path.split(".")
        target = conversation
        for name in parents:
            target = target[name]
        if value is DROP:
            del target[last]
        else:
            target[last] = value
    return [conversation]


DROP = object()


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"mapping.u1.message.author": "user"}, "mapping.u1.message.author"),
        ({"mapping.u1.message.author": ["user"]}, "mapping.u1.message.author"),
        ({"mapping.a1.parent": ["u1"]}, "mapping.a1.parent"),
        ({"mapping.a1.parent": {"u1": 1}}, "mapping.a1.parent"),
        ({"current_node": DROP, "mapping.a1.message.create_time": 10**400}, "mapping.a1.message.create_time"),
        ({"mapping.u1.message.create_time": 1e300}, "mapping.u1.message.create_time"),
        ({"mapping.u1.message.content.parts": "hello"}, "mapping.u1.message.content.parts"),
    ],
    ids=["author-text", "author-list", "parent-list", "parent-object", "time-10e400", "time-past-9999", "parts-text"],
)
async def test_a_chatgpt_export_with_a_field_of_the_wrong_type_is_422_naming_its_path(
    http: httpx.AsyncClient, bus: Bus, changes: dict[str, Any], path: str
) -> None:
    """The probe: these were 500s (AttributeError, unhashable type, OverflowError)."""
    body = json.dumps(chatgpt_export(**changes)).encode()
    mark = await ledger_mark(bus)
    reply = await http.post("/api/import", content=body, headers={"Content-Type": "application/json"})
    assert reply.status_code == 422, reply.text
    refusal = reply.json()
    assert refusal["error"]["code"] == "bad_lines"
    [error] = refusal["errors"]
    assert error["line"] == 1 and error["message"].startswith(path + ":"), error
    assert await imported_events(bus, refusal["import_id"], mark) == []


async def test_import_lines_past_the_depth_limit_or_with_nan_are_bad_lines(http: httpx.AsyncClient) -> None:
    good = dialog(3, "bounded")
    deep = '{"x":' * 70 + "1" + "}" * 70
    body = [good[0], json.dumps(good[1])[:-1] + ', "extra": ' + deep + "}", '{"ts": NaN}', good[2]]
    reply = await http.post("/api/import", content=ndjson(body), headers=NDJSON)
    assert reply.status_code == 422, reply.text
    errors = reply.json()["errors"]
    assert [e["line"] for e in errors] == [2, 3]
    assert "64 levels" in errors[0]["message"] and "NaN" in errors[1]["message"]
