"""The memory service as a real process beside the real ledger: events go in through the
ledger, search and fact commands come back over the bus, and the index survives a SIGKILL
mid-stream and its own deletion with exactly the same answers."""

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, ImportFinished, ImportStarted, Payload
from delegate.contracts.ids import new_id
from delegate.contracts.memory import (
    ImportStatusRequest,
    MemoryFactsCommand,
    MemorySearchReply,
    MemorySearchRequest,
)
from delegate.contracts.messages import GetRequest, QueryRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from tests.support.nats import role_env
from tests.support.system import System, module_system
from tests.support.waiting import eventually

from .builders import History

pytestmark = [pytest.mark.integration]

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    """One system for the module; each test uses words of its own, so none reads another's."""
    env = {"MEMORY_RESYNC_SECONDS": "1"}
    with module_system(tmp_path_factory.mktemp("memory"), request, "ledger", "memory", env=env,
                       separate=("memory",)) as system:
        yield system


def index_file(system: System) -> Path:
    return system.runtime / "memory" / "index.sqlite"


async def commit(bus: Bus, events: list[Event]) -> int:
    """Append through the ledger; the newest seq once all of them are committed."""
    await asyncio.gather(*(bus.publish(topics.ledger_append("test"), e) for e in events))

    async def last() -> Event | None:
        try:
            reply = await bus.request(topics.LEDGER_GET, GetRequest(id=events[-1].id))
        except (RemoteError, BusUnavailable):
            return None
        return reply.event if reply.event and reply.event.seq else None

    await eventually(last, "the events to be committed")
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=0, limit=1))
    return reply.last_seq


async def indexed_through(bus: Bus, seq: int, timeout: float = 30.0) -> None:
    async def done() -> bool:
        try:
            pong = await bus.ping("memory", timeout=1.0)
        except (RemoteError, BusUnavailable):
            return False
        return pong.ready and pong.counts.get("indexed_through_seq", 0) >= seq

    await eventually(done, f"the memory index to reach seq {seq}", timeout)


async def find(bus: Bus, query: str, **fields: object) -> MemorySearchReply:
    return await bus.request(topics.MEMORY_SEARCH, MemorySearchRequest(query=query, now=NOW, **fields))


async def facts(bus: Bus, **fields: object) -> object:
    return await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(**fields))


def ranked(reply: MemorySearchReply) -> list[tuple[str, str, str, float]]:
    return [(r.kind, r.id, r.text, r.score) for r in reply.results]


async def test_facts_are_searched_edited_forgotten_and_remembered_over_the_bus(bus: Bus) -> None:
    word = f"zq{new_id()[-6:]}"  # this test's own word
    h = History(seq=False)
    said = h.say(f"my {word} cat is called Tiger")
    h.fact(f"The owner's {word} cat is called Tiger", [said], fact_id=f"cat-{word}")
    fixed = h.say(f"sorry, my {word} cat is called Tigger")
    h.fact(f"The owner's {word} cat is called Tigger", [fixed], fact_id=f"cat2-{word}", supersedes=(f"cat-{word}",))
    await indexed_through(bus, await commit(bus, h.events))

    reply = await find(bus, f"what is my {word} cat called")
    top = reply.results[0]
    assert (top.kind, top.id, top.event_ids) == ("fact", f"cat2-{word}", [fixed.id])
    assert f"cat-{word}" not in {r.id for r in reply.results}  # the retired fact is no result at all

    edited = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(
        op="edit", fact_id=f"cat2-{word}", text=f"The owner's {word} cat is called Tigger the Third",
        request_id=f"edit-{word}"))
    assert edited.fact is not None and edited.fact.text.endswith("the Third") and edited.event_id
    # read-your-writes: the reply came after the index took the change
    assert (await find(bus, f"{word} cat")).results[0].text.endswith("the Third")
    again = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(
        op="edit", fact_id=f"cat2-{word}", text=f"The owner's {word} cat is called Tigger the Third",
        request_id=f"edit-{word}"))
    assert again.fact is not None
    assert again.event_id == edited.event_id and len(again.fact.history) == len(edited.fact.history)

    with pytest.raises(RemoteError) as conflict:
        await facts(bus, op="edit", fact_id=f"cat-{word}", text="no")
    assert conflict.value.code == "conflict"
    with pytest.raises(RemoteError) as missing:
        await facts(bus, op="forget", fact_id=f"nope-{word}")
    assert missing.value.code == "not_found"

    gone = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="forget", fact_id=f"cat2-{word}"))
    assert gone.fact is not None and gone.fact.status == "forgotten"
    assert not [r for r in (await find(bus, f"{word} cat")).results if r.kind == "fact"]
    turn = await find(bus, f"{word} cat Tigger", purpose="turn")
    assert fixed.id not in {r.id for r in turn.results}  # the forgotten fact's source turn is withheld

    kept = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(
        op="remember", text=f"The owner's {word} dog is called Rex", type="fact", request_id=f"rem-{word}",
        event_ids=[said.id], conversation_id=h.conversation_id))
    assert kept.fact is not None and kept.fact.origin == "tool" and kept.fact.event_ids == [said.id]
    listed = await bus.request(topics.MEMORY_FACTS, MemoryFactsCommand(op="list"))
    mine = [f for f in listed.facts if word in f.text]
    assert [f.id for f in mine] == [kept.fact.id, f"cat2-{word}", f"cat-{word}"]  # newest change first
    assert [c.kind for c in mine[1].history][:2] == ["memory.fact.forgotten", "memory.fact.edited"]


async def test_import_progress_is_read_from_the_index(bus: Bus) -> None:
    import_id = new_id()
    h = History(seq=False)
    payload: Payload = ImportStarted(import_id=import_id, format="ndjson", lines=2, conversations=1, events=2)
    h.add(payload, channel="inner")
    for n, text in enumerate(("we hiked the Pyrenees", "and swam in the sea")):
        h.imported(text, import_id=import_id, speaker="Ana", ref=f"L{n}", ts=datetime(2023, 5, 1 + n, tzinfo=UTC))
    h.add(ImportFinished(import_id=import_id, status="done", events=2, conversations=1), channel="inner")
    await indexed_through(bus, await commit(bus, h.events))
    status = await bus.request(topics.MEMORY_IMPORT, ImportStatusRequest(import_id=import_id))
    assert (status.status, status.events, status.indexed, status.total) == ("done", 2, 2, 2)
    hit = (await find(bus, "when did Ana hike the Pyrenees"))
    assert hit.results[0].refs == ["L0"]
    with pytest.raises(RemoteError) as missing:
        await bus.request(topics.MEMORY_IMPORT, ImportStatusRequest(import_id=new_id()))
    assert missing.value.code == "not_found"


async def test_a_sigkill_mid_stream_loses_and_duplicates_nothing(running: System, bus: Bus) -> None:
    word = f"kx{new_id()[-6:]}"
    h = History(seq=False)
    events = [h.say(f"{word} note number {n}") for n in range(600)]
    first, rest = events[:300], events[300:]
    start = await commit(bus, first[:1])

    async def some_indexed() -> bool:
        try:
            pong = await bus.ping("memory", timeout=1.0)
        except (RemoteError, BusUnavailable):  # busy indexing on a loaded machine: ask again
            return False
        return pong.counts.get("indexed_through_seq", 0) > start

    sending = asyncio.create_task(commit(bus, first[1:]))
    await eventually(some_indexed, "the first events to be indexed")
    running.kill("memory")  # SIGKILL, somewhere in the middle of the stream
    await sending
    last = await commit(bus, rest)  # committed while the memory service is down
    running.restart("memory")
    await indexed_through(bus, last)
    with sqlite3.connect(index_file(running)) as db:
        total, distinct = db.execute(
            "SELECT count(*), count(DISTINCT event_id) FROM messages WHERE text LIKE ?", (f"{word} note%",)
        ).fetchone()
        indexed = int(db.execute("SELECT value FROM meta WHERE key = 'last_seq'").fetchone()[0])
    assert (total, distinct) == (600, 600)
    assert indexed >= last


async def test_deleting_the_index_rebuilds_it_with_identical_results(running: System, bus: Bus) -> None:
    word = f"rb{new_id()[-6:]}"
    h = History(seq=False)
    said = h.say(f"the {word} boat is moored in Porto")
    h.say(f"the {word} boat needs new sails", role="assistant", parent_id=said.id)
    h.fact(f"The owner's {word} boat is moored in Porto", [said])
    await indexed_through(bus, await commit(bus, h.events))
    queries = [f"{word} boat", f"where is the {word} boat", "Porto", "cat called", "note number 7"]
    before = [ranked(await find(bus, q, limit=20)) for q in queries]
    running.procs["memory"].stop()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{index_file(running)}{suffix}").unlink(missing_ok=True)
    running.restart("memory")
    after = [ranked(await find(bus, q, limit=20)) for q in queries]
    assert after == before and all(before)

    # `python -m delegate.memory rebuild` (the service stopped) replays the ledger into a new file
    running.procs["memory"].stop()
    assert running.nats is not None
    env = {**running.env, **role_env(running.nats, "memory")}
    done = subprocess.run(
        [sys.executable, "-m", "delegate.memory", "rebuild"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "index rebuilt through seq" in done.stdout + done.stderr
    running.restart("memory")
    assert [ranked(await find(bus, q, limit=20)) for q in queries] == before
