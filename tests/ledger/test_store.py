"""The store interface against real databases: SQLite (WAL, DELETE) and PostgreSQL."""

import asyncio
import contextlib
import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import psycopg
import pytest

from delegate.contracts.cursor import Cursor
from delegate.ledger.store import LedgerStore
from delegate.ledger.store.base import reply_bytes
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore

from .builders import (
    capsule,
    checkpoint,
    compacted,
    conversation_ended,
    conversation_opened,
    key,
    message,
    span_closed,
    span_opened,
    tool_call,
    usage,
)


def rows(store: LedgerStore, sql: str) -> list[tuple[Any, ...]]:
    """Look at the tables directly, as an operator would."""
    if isinstance(store, SqliteStore):
        with sqlite3.connect(store.path) as conn:
            return conn.execute(sql).fetchall()
    assert isinstance(store, PostgresStore)
    with psycopg.connect(store.url) as conn:
        return conn.execute(sql).fetchall()


async def test_append_assigns_seq_in_order_and_stores_each_event_once(store: LedgerStore) -> None:
    first = [message(f"m{i}", t=i) for i in range(5)]
    committed = await store.append(first)
    assert [e.id for e in committed] == [e.id for e in first]
    seqs = [e.seq for e in committed]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5

    fresh = [message("new-1", t=10), message("new-2", t=11)]
    # A redelivered batch: old events again, one new event twice within the batch.
    again = await store.append([*first, fresh[0], fresh[0], first[2], fresh[1]])
    assert [e.id for e in again] == [fresh[0].id, fresh[1].id]
    assert again[0].seq is not None and again[0].seq > max(s for s in seqs if s is not None)
    assert await store.append(first) == []
    assert rows(store, "SELECT COUNT(*) FROM conversation_events")[0][0] == 7
    assert await store.last_seq() == again[-1].seq
    stored = await store.get(event_id=first[3].id)
    assert stored is not None and stored.seq == seqs[3]
    assert stored.model_dump(exclude={"seq"}) == first[3].model_dump(exclude={"seq"})


async def test_conversations_and_spans_are_kept_in_the_same_transaction(store: LedgerStore) -> None:
    await store.append([
        conversation_opened("c1", t=0), span_opened("s1", t=1), message("a", t=2),
        span_closed("s1", t=3), span_opened("s2", t=4), message("b", span="s2", t=5),
    ])
    await store.append([message("c", conv="c2", span=None, t=6), conversation_ended("c2", t=7)])
    convs = {r[0]: r[1:] for r in rows(store, "SELECT id, opened_at, ended_at, last_seq FROM conversations")}
    assert set(convs) == {"c1", "c2"}
    assert convs["c1"][0] is not None and convs["c1"][1] is None and convs["c1"][2] == 6
    assert convs["c2"][0] is None and convs["c2"][1] is not None and convs["c2"][2] == 8
    spans = {r[0]: r[1:] for r in rows(store, "SELECT id, conversation_id, type, opened_seq, closed_at FROM spans")}
    assert spans["s1"][:3] == ("c1", "interaction", 2) and spans["s1"][3] is not None
    assert spans["s2"][:3] == ("c1", "interaction", 5) and spans["s2"][3] is None


async def test_announced_seq_is_recorded_with_a_batch(store: LedgerStore) -> None:
    assert await store.announced_seq() == 0
    await store.append([message(t=1)], announced_through=0)
    await store.append([message(t=2)], announced_through=1)
    assert await store.announced_seq() == 1
    assert await store.append([], announced_through=2) == []
    assert await store.announced_seq() == 2


async def test_first_page_is_the_newest_events_grown_to_whole_spans(store: LedgerStore) -> None:
    # Span A: t=0..10, span B interleaves from t=5, loose events without a span at the end.
    a = [span_opened("A", t=0), *(message(f"a{i}", span="A", t=2 * i + 1) for i in range(5))]
    b = [span_opened("B", t=5), *(message(f"b{i}", span="B", t=6 + i) for i in range(3))]
    loose = [message(f"x{i}", span=None, t=20 + i) for i in range(3)]
    await store.append([*b, *loose, *a])  # commit order must not matter to the timeline
    timeline = sorted([*a, *b, *loose], key=key)

    page = await store.page(before=None, limit=4, expansion_cap=100)
    # The 4 newest are x0..x2 and a4 (t=9): span A starts at t=0, and B (t=5..8) lies inside.
    assert [e.id for e in page.events] == [e.id for e in timeline]
    assert page.cursor is None
    assert all(e.seq is not None for e in page.events)

    small = await store.page(before=None, limit=2, expansion_cap=100)
    assert [e.id for e in small.events] == [e.id for e in loose[1:]]
    assert small.cursor == Cursor(loose[1].ts, loose[1].id)


async def test_older_page_includes_every_older_event_of_its_span(store: LedgerStore) -> None:
    old = [span_opened("old", t=0), message("o1", span="old", t=1)]
    s = [span_opened("S", t=10), *(message(f"s{i}", span="S", t=11 + i) for i in range(6))]
    other = [span_opened("T", t=12.5), message("t1", span="T", t=13.5)]
    await store.append([*old, *s, *other])
    newest = sorted([*s, *other], key=key)[-2]
    page = await store.page(before=Cursor(newest.ts, newest.id), limit=2, expansion_cap=100)
    # Strictly older than the cursor, grown back to S's span.opened (and T, interleaved, whole too).
    expected = [e for e in sorted([*old, *s, *other], key=key) if key(e) < key(newest) and e.span_id != "old"]
    assert [e.id for e in page.events] == [e.id for e in expected]
    assert page.events[0].kind == "span.opened" and page.events[0].span_id == "S"
    assert page.cursor == Cursor(s[0].ts, s[0].id)
    last = await store.page(before=page.cursor, limit=2, expansion_cap=100)
    assert [e.id for e in last.events] == [e.id for e in old] and last.cursor is None


async def test_the_expansion_cap_bounds_a_page_and_keeps_it_contiguous(store: LedgerStore) -> None:
    big = [span_opened("big", t=0), *(message(f"m{i}", span="big", t=1 + i) for i in range(30))]
    await store.append(big)
    page = await store.page(before=None, limit=5, expansion_cap=10)
    assert page.capped and len(page.events) == 15
    assert [e.id for e in page.events] == [e.id for e in big[-15:]]
    rest = await store.page(before=page.cursor, limit=100, expansion_cap=10)
    assert [e.id for e in rest.events] == [e.id for e in big[:-15]] and rest.cursor is None


async def test_empty_ledger_pages_and_resumes_to_nothing(store: LedgerStore) -> None:
    page = await store.page(before=None, limit=10, expansion_cap=10)
    assert page.events == [] and page.cursor is None
    state = await store.resume(turn_limit=5)
    assert state.conversation_id is None and state.last_seq == 0


async def test_query_by_seq_with_filters(store: LedgerStore) -> None:
    events = [
        span_opened("s1", t=0), message("a", t=1), tool_call(t=2), message("b", role="assistant", t=3),
        message("c", conv="c2", span="s2", t=4), usage(10, t=5),
    ]
    committed = await store.append(events)
    seq = {e.id: e.seq for e in committed}
    everything = await store.query(after_seq=0, limit=100)
    assert [e.id for e in everything.events] == [e.id for e in events]
    assert not everything.more and everything.last_seq == max(seq.values())

    first = await store.query(after_seq=0, limit=2)
    assert len(first.events) == 2 and first.more
    rest = await store.query(after_seq=first.events[-1].seq or 0, limit=100)
    assert [e.id for e in rest.events] == [e.id for e in events[2:]]

    ranged = await store.query(after_seq=seq[events[1].id] or 0, through_seq=seq[events[3].id], limit=100)
    assert [e.id for e in ranged.events] == [events[2].id, events[3].id]
    only = await store.query(conversation_id="c1", kinds=["message"], limit=100)
    assert [e.id for e in only.events] == [events[1].id, events[3].id]
    assert [e.id for e in (await store.query(span_id="s2")).events] == [events[4].id]
    assert (await store.query(kinds=[])).events == []


async def test_get_by_id_or_client_msg_id(store: LedgerStore) -> None:
    first = message("hello", client_msg_id="client-1", t=1)
    await store.append([first, message("other", client_msg_id="client-2", t=2)])
    by_client = await store.get(client_msg_id="client-1")
    assert by_client is not None and by_client.id == first.id
    assert (await store.get(event_id=first.id)) == by_client
    assert await store.get(event_id="missing") is None
    assert await store.get(client_msg_id="missing") is None
    found = await store.get(event_id="missing", client_msg_id="client-1")
    assert found is not None and found.id == first.id


async def test_resume_restores_the_newest_open_conversation(store: LedgerStore) -> None:
    old_capsule = capsule("old facts", conv="c2", t=0.5)
    await store.append([
        conversation_opened("c1", t=0), message("old", conv="c1", span=None, t=1), conversation_ended("c1", t=2),
        conversation_opened("c2", t=3), old_capsule, span_opened("s1", conv="c2", t=4),
    ])
    turns = []
    for i in range(6):
        turns.append(message(f"u{i}", conv="c2", t=10 + 2 * i))
        turns.append(message(f"a{i}", conv="c2", role="assistant", response_id=f"resp_{i}", t=11 + 2 * i))
    newer_capsule = capsule("newer facts", conv="c2", t=22.5)
    await store.append(
        [*turns[:8], newer_capsule, *turns[8:], usage(1234, conv="c2", t=30), checkpoint(0, 5, conv="c2", t=31)]
    )
    manual = compacted("manual", conv="c2", t=32)
    await store.append([manual, message("late question", conv="c2", t=33)])

    state = await store.resume(turn_limit=4)
    assert state.conversation_id == "c2"
    assert state.open_span is not None and state.open_span.kind == "span.opened" and state.open_span.span_id == "s1"
    assert [t.payload["text"] for t in state.recent_turns] == ["a4", "u5", "a5", "late question"]
    assert state.capsule is not None and state.capsule.payload["text"] == "newer facts"
    # The chain id survives a later manual compaction: the agent decides what to do with it.
    assert state.last_response_id == "resp_5"
    assert state.last_compacted is not None and state.last_compacted.id == manual.id
    assert state.last_usage is not None and state.last_usage.payload["input_tokens"] == 1234
    assert state.last_checkpoint is not None and state.last_checkpoint.payload["through_seq"] == 5
    assert state.last_seq == await store.last_seq()

    # The newest answer is there independently of the turn window (the agent orders it
    # against a later manual compaction to decide whether the chain still holds).
    windowless = await store.resume(turn_limit=0)
    assert windowless.last_assistant is not None and windowless.last_assistant.payload["text"] == "a5"

    await store.append([span_closed("s1", conv="c2", t=40)])
    assert (await store.resume(turn_limit=0)).open_span is None
    assert (await store.resume(turn_limit=0)).recent_turns == []
    await store.append([conversation_ended("c2", t=41)])
    state = await store.resume(turn_limit=4)
    assert state.conversation_id is None and state.last_seq == await store.last_seq()


async def test_reopening_keeps_data_and_applies_no_migration_twice(store: LedgerStore) -> None:
    event = message(t=1)
    await store.append([event])
    await store.close()
    await store.open()
    assert (await store.get(event_id=event.id)) is not None
    assert rows(store, "SELECT version, name FROM schema_version ORDER BY version") == [
        (1, "initial"), (2, "sessions"), (3, "terms"), (4, "fences"), (5, "thoughtflow"), (6, "kinds"), (7, "usage"),
    ]


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
async def test_sqlite_journal_mode_and_durability_are_what_we_asked_for(tmp_path: Path, mode: str) -> None:
    store = SqliteStore(tmp_path / "db" / "assistant.sqlite", journal_mode=mode)
    await store.open()
    try:
        await store.append([message(t=1)])
        with sqlite3.connect(store.path) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0].upper() == mode
        sync = await store._writer.call(lambda c: c.execute("PRAGMA synchronous").fetchone()[0])
        busy = await store._writer.call(lambda c: c.execute("PRAGMA busy_timeout").fetchone()[0])
        assert sync == 2 and busy == 5000  # FULL; 5 s busy timeout
    finally:
        await store.close()


async def test_stored_json_is_the_event_json(store: LedgerStore) -> None:
    """Pages are spliced from stored JSON: it must be the very document pydantic would send."""
    tricky = [
        message('quotes " and \\ backslashes, tabs\tand newlines\n', t=1, meta={"nested": [1, 2.5, None, True]}),
        message("ünïcödé ✓ 🚀 and \u0000 and \u2028", role="assistant", response_id="resp_é", t=2),
        span_opened("späň", conv="cönv", t=3, id="id with spaces"),
    ]
    committed = await store.append(tricky)
    seqs = {c.id: c.seq for c in committed}
    page = await store.page(before=None, limit=10, expansion_cap=0)
    assert [r.id for r in page.rows] == [e.id for e in sorted(tricky, key=key)]
    for row in [*page.rows, *committed]:
        original = next(e for e in tricky if e.id == row.id).with_seq(seqs[row.id])
        assert json.loads(row.json()) == json.loads(original.model_dump_json())
        assert row.event() == original


async def test_a_large_batch_with_stored_events_mixed_in_gets_exact_seqs(store: LedgerStore) -> None:
    # 300 = 256 + 32 + 8 + 4: every multi-row statement size the SQLite writer uses at once.
    early = [message(f"e{i}", t=i) for i in range(3)]
    first = await store.append(early)
    batch = [message(f"m{i}", t=10 + i, meta={"n": i, "x": 1e-05 * i}) for i in range(300)]
    committed = await store.append(batch)
    assert [c.id for c in committed] == [e.id for e in batch]
    top = first[-1].seq or 0
    assert [c.seq for c in committed] == list(range(top + 1, top + 301))
    # A redelivery: stored events mixed with new ones; only the new ones are stored, with the
    # seqs the database gave them (skipped-over duplicates may leave gaps, never reuse).
    fresh = [message(f"f{i}", t=400 + i) for i in range(5)]
    again = await store.append([batch[0], fresh[0], *batch[100:200], *fresh[1:], early[1]])
    assert [c.id for c in again] == [e.id for e in fresh]
    seqs = [c.seq or 0 for c in again]
    assert seqs == sorted(seqs) and seqs[0] > top + 300
    for c in again:
        got = await store.get(event_id=c.id)
        assert got is not None and got.seq == c.seq
    for c in [*committed[::37], *again]:
        original = next(e for e in [*batch, *fresh] if e.id == c.id).with_seq(c.seq or 0)
        assert c.json() == original.model_dump_json()  # byte for byte: the stored payload is pydantic's
    assert rows(store, "SELECT COUNT(*) FROM conversation_events")[0][0] == 308


async def test_a_payload_that_is_not_strict_json_is_refused(store: LedgerStore) -> None:
    bad = message("x", t=1).model_copy(update={"payload": {"text": "x", "meta": {"v": float("nan")}}})
    with pytest.raises(ValueError):
        await store.append([bad])
    named = message("NaN and Infinity are fine as words", t=2)
    assert [c.id for c in await store.append([named])] == [named.id]


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
async def test_an_append_cancelled_mid_transaction_leaves_the_writer_usable(tmp_path: Path, mode: str) -> None:
    store = SqliteStore(tmp_path / "db" / "assistant.sqlite", journal_mode=mode)
    await store.open()
    try:
        for steps in range(4):  # cancelled at each await of the transaction in turn
            doomed = asyncio.create_task(store.append([message(f"doomed {steps}", t=steps)]))
            for _ in range(steps):
                await asyncio.sleep(0)
            doomed.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await doomed
            kept = message(f"kept {steps}", t=10 + steps)
            assert [c.id for c in await store.append([kept])] == [kept.id]
        texts = {r[0] for r in rows(store, "SELECT json_extract(payload, '$.text') FROM conversation_events")}
        assert {f"kept {i}" for i in range(4)} <= texts
    finally:
        await store.close()


async def test_query_within_a_byte_budget_says_more_and_walks_to_everything(store: LedgerStore) -> None:
    # Sizes around the budget, and one event bigger than all of it: it still comes, alone.
    events = [message("x" * size, t=i) for i, size in enumerate([10, 900, 300, 5000, 20, 20, 1200, 700, 0, 2500])]
    await store.append(events)
    budget = 2000
    walked: list[str] = []
    after = 0
    while True:
        result = await store.query(after_seq=after, limit=500, max_bytes=budget)
        assert result.rows, "more promised events after after_seq"
        assert len(result.rows) == 1 or sum(reply_bytes(r) for r in result.rows) <= budget
        walked += [r.id for r in result.rows]
        if not result.more:
            break
        after = result.rows[-1].seq
    assert walked == [e.id for e in events]
    assert [r.id for r in (await store.query(after_seq=3, max_bytes=budget)).rows] == [events[3].id]
    # Without a budget nothing changes: the row limit alone.
    everything = await store.query(limit=500)
    assert [r.id for r in everything.rows] == walked and not everything.more


async def test_resume_leaves_out_the_oldest_turns_to_fit_a_byte_budget(store: LedgerStore) -> None:
    turns = [message(f"{i}:" + "t" * 1000, role="user" if i % 2 else "assistant", t=2 + i) for i in range(8)]
    await store.append([conversation_opened("c1", t=0), span_opened("s1", t=1), *turns])
    full = await store.resume(turn_limit=8)
    assert [t.id for t in full.recent_turns] == [t.id for t in turns]
    budget = 4500  # the open span and the newest answer (~1.3 KB) plus two more turns of ~1.3 KB
    state = await store.resume(turn_limit=8, max_bytes=budget)
    assert [t.id for t in state.recent_turns] == [t.id for t in turns[-2:]], "the newest turns, oldest first"
    assert state.open_span is not None and state.last_assistant is not None
    anchors = [state.open_span, state.last_assistant]
    assert sum(len(e.model_dump_json().encode()) + 1 for e in [*anchors, *state.recent_turns]) <= budget


@pytest.mark.parametrize("mode", ["WAL", "DELETE"])
async def test_the_sqlite_database_is_private_to_its_owner(tmp_path: Path, mode: str) -> None:
    # A umask that makes files world-readable, as a shell's usually does: the database holds
    # every word said, so its folder is 0700 and every file of it 0600, like the token file.
    old = os.umask(0o022)
    try:
        store = SqliteStore(tmp_path / "runtime-data" / "db" / "assistant.sqlite", journal_mode=mode)
        await store.open()
        try:
            await store.append([message(t=1)])
            files = sorted(p.name for p in store.path.parent.iterdir())
            assert store.path.name in files and (mode == "DELETE" or f"{store.path.name}-wal" in files)
            assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
            for name in files:
                assert stat.S_IMODE((store.path.parent / name).stat().st_mode) == 0o600, name
        finally:
            await store.close()
        # An older install's files were created world-readable: opening narrows them.
        store.path.parent.chmod(0o755)
        store.path.chmod(0o644)
        await store.open()
        await store.close()
        assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
        assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    finally:
        os.umask(old)
