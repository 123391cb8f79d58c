"""The sessions table: projected from session.* events in the writing transaction, on every backend."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from delegate.ledger.store import LedgerStore
from delegate.ledger.store import postgres as postgres_store
from delegate.ledger.store import sqlite as sqlite_store
from delegate.ledger.store.base import migrations

from .builders import at, conversation_opened, message, session_ended, session_started, span_opened
from .conftest import BACKENDS, make_store
from .test_store import rows

COLUMNS = "id, type, holder, started_at, started_seq, supersedes, ended_at, end_reason"


def _when(value: Any) -> datetime | None:
    """A timestamp column as a datetime: SQLite keeps the wire text, PostgreSQL a timestamptz."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(value).astimezone(UTC)


def sessions(store: LedgerStore) -> dict[str, dict[str, Any]]:
    found = {}
    for row in rows(store, f"SELECT {COLUMNS} FROM sessions"):
        record = dict(zip(COLUMNS.split(", "), row, strict=True))
        record["started_at"], record["ended_at"] = _when(record["started_at"]), _when(record["ended_at"])
        found[record["id"]] = record
    return found


async def test_a_session_starts_ends_and_is_superseded(store: LedgerStore) -> None:
    a = session_started("A", holder="agent-a", t=1)
    [stored] = await store.append([a])
    assert sessions(store)["A"] == {
        "id": "A", "type": "agent", "holder": "agent-a", "started_at": at(1), "started_seq": stored.seq,
        "supersedes": None, "ended_at": None, "end_reason": None,
    }
    state = await store.resume(turn_limit=0)
    assert state.agent_session is not None
    opened = state.agent_session
    assert (opened.id, opened.holder, opened.started_at, opened.started_seq) == ("A", "agent-a", at(1), stored.seq)

    await store.append([session_ended("A", "shutdown", t=2)])
    assert (sessions(store)["A"]["ended_at"], sessions(store)["A"]["end_reason"]) == (at(2), "shutdown")
    assert (await store.resume(turn_limit=0)).agent_session is None

    # B's holder is killed; C takes over naming B: B is closed as superseded, at C's start.
    await store.append([session_started("B", holder="agent-b", t=3)])
    await store.append([session_started("C", holder="agent-a", supersedes="B", t=4)])
    got = sessions(store)
    assert (got["B"]["ended_at"], got["B"]["end_reason"]) == (at(4), "superseded")
    assert got["C"]["supersedes"] == "B" and got["C"]["ended_at"] is None
    assert (await store.resume(turn_limit=0)).agent_session.id == "C"  # type: ignore[union-attr]

    # B comes back from a partition and reports its loss: the first end recorded stands.
    await store.append([session_ended("B", "lost", t=5)])
    assert (sessions(store)["B"]["ended_at"], sessions(store)["B"]["end_reason"]) == (at(4), "superseded")
    # Superseding a session that already ended leaves its end alone too.
    await store.append([session_started("D", supersedes="A", t=6)])
    assert (sessions(store)["A"]["ended_at"], sessions(store)["A"]["end_reason"]) == (at(2), "shutdown")
    assert set(sessions(store)) == {"A", "B", "C", "D"}


async def test_start_supersede_and_end_within_one_batch(store: LedgerStore) -> None:
    committed = await store.append([
        session_started("A", t=1), session_started("B", holder="agent-b", supersedes="A", t=2),
        session_ended("B", "shutdown", t=3), session_ended("A", "lost", t=4),
    ])
    got = sessions(store)
    assert (got["A"]["started_seq"], got["A"]["ended_at"], got["A"]["end_reason"]) == (
        committed[0].seq, at(2), "superseded"
    )
    assert (got["B"]["holder"], got["B"]["ended_at"], got["B"]["end_reason"]) == ("agent-b", at(3), "shutdown")
    assert (await store.resume(turn_limit=0)).agent_session is None


async def test_redelivered_session_events_change_nothing(store: LedgerStore) -> None:
    a, b = session_started("A", t=1), session_started("B", supersedes="A", t=2)
    first = await store.append([a])
    await store.append([a, b, a])  # a redelivery, and a duplicate inside the batch
    before = sessions(store)
    assert before["A"]["started_seq"] == first[0].seq and before["A"]["end_reason"] == "superseded"

    # The whole history again, and a retried start with a fresh event id but the same session:
    # nothing moves (ids dedupe the events, COALESCE keeps the first start and the first end).
    assert await store.append([a, b]) == []
    retried = session_started("B", holder="someone-else", t=9)
    await store.append([retried])
    assert sessions(store) == before
    assert (await store.resume(turn_limit=0)).agent_session.id == "B"  # type: ignore[union-attr]

    await store.append([session_ended("B", t=10)])
    ended = sessions(store)
    assert await store.append([session_ended("B", "lost", t=11), b]) != []  # a new event, stored
    assert sessions(store) == ended and ended["B"]["end_reason"] == "shutdown"


async def test_superseding_an_unknown_session_records_no_row(store: LedgerStore) -> None:
    await store.append([session_started("B", supersedes="never-started", t=1)])
    assert set(sessions(store)) == {"B"}
    # An end whose start the ledger never saw still leaves its row, as a span.closed does.
    await store.append([session_ended("X", "shutdown", t=2)])
    assert sessions(store)["X"]["started_seq"] is None and sessions(store)["X"]["end_reason"] == "shutdown"
    assert (await store.resume(turn_limit=0)).agent_session.id == "B"  # type: ignore[union-attr]


async def test_the_open_session_travels_with_a_resumed_conversation(store: LedgerStore) -> None:
    await store.append([
        session_started("A", t=0), conversation_opened("c1", t=1), span_opened("s1", t=2), message("hi", t=3),
    ])
    state = await store.resume(turn_limit=5)
    assert state.conversation_id == "c1" and [e.payload["text"] for e in state.recent_turns] == ["hi"]
    assert state.agent_session is not None and state.agent_session.id == "A"
    # Session events belong to no conversation: they never show up among its turns or anchors.
    assert all(e.kind == "message" for e in state.recent_turns)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_v1_database_migrates_to_v2_and_keeps_its_data(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = request.getfixturevalue("pg_url") if backend == "postgres" else None
    module = postgres_store if backend == "postgres" else sqlite_store
    # The ledger as it shipped before 002: the same code, knowing only the first migration.
    with monkeypatch.context() as old:
        old.setattr(module, "migrations", lambda name: migrations(name)[:1])
        v1 = make_store(backend, tmp_path, pg)
        await v1.open()
        written = await v1.append([conversation_opened("c1", t=1), span_opened("s1", t=2), message("before", t=3)])
        await v1.close()
    assert rows(v1, "SELECT version, name FROM schema_version") == [(1, "initial")]

    v2 = make_store(backend, tmp_path, pg)
    await v2.open()
    try:
        versions = rows(v2, "SELECT version, name FROM schema_version ORDER BY version")
        assert versions == [(1, "initial"), (2, "sessions")]
        assert sessions(v2) == {}
        for event in written:
            got = await v2.get(event_id=event.id)
            assert got is not None and got.seq == event.seq
        state = await v2.resume(turn_limit=5)
        assert state.conversation_id == "c1" and state.open_span is not None and state.agent_session is None
        started = await v2.append([session_started("A", t=4)])
        assert started[0].seq is not None and started[0].seq > max(e.seq for e in written)
        assert sessions(v2)["A"]["started_seq"] == started[0].seq
        page = await v2.page(before=None, limit=10, expansion_cap=0)
        assert [e.id for e in page.events] == [*(e.id for e in written), started[0].id]
    finally:
        await v2.close()
    # Opening it again applies nothing twice.
    await v2.open()
    await v2.close()
    assert rows(v2, "SELECT COUNT(*) FROM schema_version")[0][0] == 2
