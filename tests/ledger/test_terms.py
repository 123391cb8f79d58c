"""The terms table: projected from term.* events in the writing transaction, on every backend."""

import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest

from delegate.contracts.events import Event
from delegate.ledger.store import LedgerStore
from delegate.ledger.store import postgres as postgres_store
from delegate.ledger.store import sqlite as sqlite_store
from delegate.ledger.store.base import migrations
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore

from .builders import at, conversation_opened, message, span_opened, term_ended, term_started
from .conftest import BACKENDS, make_store
from .test_store import rows

COLUMNS = "id, type, holder, started_at, started_seq, supersedes, ended_at, end_reason"


def _when(value: Any) -> datetime | None:
    """A timestamp column as a datetime: SQLite keeps the wire text, PostgreSQL a timestamptz."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).astimezone(UTC)


def terms(store: LedgerStore) -> dict[str, dict[str, Any]]:
    found = {}
    for row in rows(store, f"SELECT {COLUMNS} FROM terms"):
        record = dict(zip(COLUMNS.split(", "), row, strict=True))
        record["started_at"], record["ended_at"] = _when(record["started_at"]), _when(record["ended_at"])
        found[record["id"]] = record
    return found


async def test_a_term_starts_ends_and_is_superseded(store: LedgerStore) -> None:
    a = term_started("A", holder="agent-a", t=1)
    [stored] = await store.append([a])
    assert terms(store)["A"] == {
        "id": "A", "type": "agent", "holder": "agent-a", "started_at": at(1), "started_seq": stored.seq,
        "supersedes": None, "ended_at": None, "end_reason": None,
    }
    state = await store.resume(turn_limit=0)
    assert state.agent_term is not None
    opened = state.agent_term
    assert (opened.id, opened.holder, opened.started_at, opened.started_seq) == ("A", "agent-a", at(1), stored.seq)

    await store.append([term_ended("A", "shutdown", t=2)])
    assert (terms(store)["A"]["ended_at"], terms(store)["A"]["end_reason"]) == (at(2), "shutdown")
    assert (await store.resume(turn_limit=0)).agent_term is None

    # B's holder is killed; C takes over naming B: B is closed as superseded, at C's start.
    await store.append([term_started("B", holder="agent-b", t=3)])
    await store.append([term_started("C", holder="agent-a", supersedes="B", t=4)])
    got = terms(store)
    assert (got["B"]["ended_at"], got["B"]["end_reason"]) == (at(4), "superseded")
    assert got["C"]["supersedes"] == "B" and got["C"]["ended_at"] is None
    assert (await store.resume(turn_limit=0)).agent_term.id == "C"  # type: ignore[union-attr]

    # B comes back from a partition and reports its loss: the first end recorded stands.
    await store.append([term_ended("B", "lost", t=5)])
    assert (terms(store)["B"]["ended_at"], terms(store)["B"]["end_reason"]) == (at(4), "superseded")
    # Superseding a term that already ended leaves its end alone too.
    await store.append([term_started("D", supersedes="A", t=6)])
    assert (terms(store)["A"]["ended_at"], terms(store)["A"]["end_reason"]) == (at(2), "shutdown")
    assert set(terms(store)) == {"A", "B", "C", "D"}


async def test_start_supersede_and_end_within_one_batch(store: LedgerStore) -> None:
    committed = await store.append([
        term_started("A", t=1), term_started("B", holder="agent-b", supersedes="A", t=2),
        term_ended("B", "shutdown", t=3), term_ended("A", "lost", t=4),
    ])
    got = terms(store)
    assert (got["A"]["started_seq"], got["A"]["ended_at"], got["A"]["end_reason"]) == (
        committed[0].seq, at(2), "superseded"
    )
    assert (got["B"]["holder"], got["B"]["ended_at"], got["B"]["end_reason"]) == ("agent-b", at(3), "shutdown")
    assert (await store.resume(turn_limit=0)).agent_term is None


async def test_redelivered_term_events_change_nothing(store: LedgerStore) -> None:
    a, b = term_started("A", t=1), term_started("B", supersedes="A", t=2)
    first = await store.append([a])
    await store.append([a, b, a])  # a redelivery, and a duplicate inside the batch
    before = terms(store)
    assert before["A"]["started_seq"] == first[0].seq and before["A"]["end_reason"] == "superseded"

    # The whole history again, and a retried start with a fresh event id but the same term:
    # nothing moves (ids dedupe the events, COALESCE keeps the first start and the first end).
    assert await store.append([a, b]) == []
    retried = term_started("B", holder="someone-else", t=9)
    await store.append([retried])
    assert terms(store) == before
    assert (await store.resume(turn_limit=0)).agent_term.id == "B"  # type: ignore[union-attr]

    await store.append([term_ended("B", t=10)])
    ended = terms(store)
    assert await store.append([term_ended("B", "lost", t=11), b]) != []  # a new event, stored
    assert terms(store) == ended and ended["B"]["end_reason"] == "shutdown"


async def test_superseding_an_unknown_term_records_no_row(store: LedgerStore) -> None:
    await store.append([term_started("B", supersedes="never-started", t=1)])
    assert set(terms(store)) == {"B"}
    # An end whose start the ledger never saw still leaves its row, as a span.closed does.
    await store.append([term_ended("X", "shutdown", t=2)])
    assert terms(store)["X"]["started_seq"] is None and terms(store)["X"]["end_reason"] == "shutdown"
    assert (await store.resume(turn_limit=0)).agent_term.id == "B"  # type: ignore[union-attr]


async def test_the_open_term_travels_with_a_resumed_conversation(store: LedgerStore) -> None:
    await store.append([
        term_started("A", t=0), conversation_opened("c1", t=1), span_opened("s1", t=2), message("hi", t=3),
    ])
    state = await store.resume(turn_limit=5)
    assert state.conversation_id == "c1" and [e.payload["text"] for e in state.recent_turns] == ["hi"]
    assert state.agent_term is not None and state.agent_term.id == "A"
    # Term events belong to no conversation: they never show up among its turns or anchors.
    assert all(e.kind == "message" for e in state.recent_turns)




def _execute(store: LedgerStore, sql: str, params: tuple[Any, ...]) -> None:
    """Write rows directly, as a ledger of an older version did."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            conn.execute(sql, params)
        return
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url) as conn:
        conn.execute(sql.replace("?", "%s"), params)


# What a ledger before 003 stored for the agent's lease: session.* events (session_id first, as
# pydantic wrote it; one spelled otherwise) and the sessions table they were projected into.
OLD_EVENTS = [
    ("old-a", at(4), "session.started", '{"session_id":"A","type":"agent","holder":"agent-a"}'),
    ("old-b", at(5), "session.started", '{"type":"agent","holder":"agent-b","session_id":"B","supersedes":"A"}'),
    ("old-c", at(6), "session.ended", '{"session_id":"B","reason":"shutdown"}'),
]
OLD_SESSIONS = [
    ("A", "agent", "agent-a", at(4), 4, None, at(5), "superseded"),
    ("B", "agent", "agent-b", at(5), 5, "A", at(6), "shutdown"),
    ("C", "agent", "agent-c", at(7), 7, "B", None, None),
]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_v2_database_with_sessions_migrates_to_terms(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
    module = postgres_store if backend == "postgres" else sqlite_store
    with monkeypatch.context() as old:  # the ledger as it shipped with 002: the first two migrations
        old.setattr(module, "migrations", lambda name: migrations(name)[:2])
        v2 = make_store(backend, tmp_path, pg)
        await v2.open()
        written = await v2.append([conversation_opened("c1", t=1), span_opened("s1", t=2), message("before", t=3)])
        await v2.close()
    def ts(when: datetime) -> str | datetime:
        return when if backend == "postgres" else when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    for event_id, when, kind, payload in OLD_EVENTS:
        _execute(v2, "INSERT INTO conversation_events (id, ts, kind, channel, payload) VALUES (?, ?, ?, 'inner', ?)",
                 (event_id, ts(when), kind, payload))
    for term in OLD_SESSIONS:
        values = tuple(ts(v) if isinstance(v, datetime) else v for v in term)
        _execute(v2, f"INSERT INTO sessions ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", values)

    store = make_store(backend, tmp_path, pg)
    await store.open()
    try:
        versions = rows(store, "SELECT version, name FROM schema_version ORDER BY version")
        assert [v for v, _ in versions] == [1, 2, 3, 4, 5, 6, 7]
        got = terms(store)
        assert set(got) == {"A", "B", "C"}
        assert (got["A"]["end_reason"], got["B"]["supersedes"], got["C"]["ended_at"]) == ("superseded", "A", None)
        assert rows(store, "SELECT COUNT(*) FROM conversation_events WHERE kind LIKE 'session.%'")[0][0] == 0
        migrated: list[Event] = []
        for event_id, *_ in OLD_EVENTS:
            event = await store.get(event_id=event_id)
            assert event is not None
            migrated.append(Event.model_validate(event.model_dump()))  # valid under today's contract
        assert [e.kind for e in migrated] == ["term.started", "term.started", "term.ended"]
        assert [e.payload for e in migrated] == [
            {"term_id": "A", "type": "agent", "holder": "agent-a"},
            {"type": "agent", "holder": "agent-b", "term_id": "B", "supersedes": "A"},
            {"term_id": "B", "reason": "shutdown"},
        ]
        state = await store.resume(turn_limit=5)
        assert state.agent_term is not None and (state.agent_term.id, state.agent_term.supersedes) == ("C", "B")
        # The projection goes on under the new names, and the old rows stay what they were.
        await store.append([term_ended("C", "lost", t=8), term_started("D", supersedes="C", t=9)])
        got = terms(store)
        assert (got["C"]["end_reason"], got["D"]["supersedes"]) == ("lost", "C")
        for stored in written:
            assert (await store.get(event_id=stored.id)) is not None
    finally:
        await store.close()
