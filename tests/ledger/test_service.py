"""The ledger service's own code path (``serve``) on a real nats-server and real databases."""

import asyncio
import json
import sqlite3

import pytest

from delegate.contracts import topics
from delegate.contracts.cursor import Cursor
from delegate.contracts.events import MAX_EVENT_BYTES, Event
from delegate.contracts.messages import (
    GetRequest,
    PageReply,
    PageRequest,
    QueryReply,
    QueryRequest,
    ResumeRequest,
    ResumeState,
)
from delegate.contracts.streams import LEDGER_WRITER
from delegate.ledger.store import sqlite_path
from delegate.runtime.bus import Bus, RemoteError
from tests.support.waiting import eventually

from .builders import conversation_opened, message, span_opened
from .conftest import Running, StartLedger, dead_letters


def _conversation(n: int) -> list[Event]:
    events = [conversation_opened("c1", t=0), span_opened("s1", t=1)]
    for i in range(n):
        events.append(message(f"q{i}", t=2 + 2 * i, client_msg_id=f"client-{i}"))
        events.append(message(f"a{i}", role="assistant", response_id=f"resp_{i}", t=3 + 2 * i))
    return events


@pytest.mark.parametrize("ledger", ["sqlite", "postgres"], indirect=True)
async def test_commits_announce_in_seq_order_once_and_queries_answer(ledger: Running) -> None:
    bus = ledger.bus
    events = _conversation(20)
    for event in events:
        await bus.publish(topics.ledger_append("test"), event)
    await eventually(lambda: len(ledger.committed) >= len(events), "all announced")
    assert [e.id for e in ledger.committed] == [e.id for e in events]
    seqs = [e.seq for e in ledger.committed]
    known = [s for s in seqs if s is not None]
    assert known == seqs and known == sorted(known) and len(set(known)) == len(known)

    # The same events again under new message ids (past JetStream's dedupe): stored and announced once.
    for event in events[:5]:
        await bus.publish(topics.ledger_append("test"), event, msg_id=f"again-{event.id}")
    sentinel = message("after the duplicates", t=100)
    await bus.publish(topics.ledger_append("test"), sentinel)
    await eventually(lambda: ledger.announced(sentinel.id), "sentinel announced")
    assert len(ledger.committed) == len(events) + 1

    # Acked only after the commit: nothing stays pending.
    async def drained() -> bool:
        info = await bus.js.consumer_info("LEDGER", LEDGER_WRITER)
        return bool(info.num_ack_pending == 0 and info.num_pending == 0)

    await eventually(drained, "all acked")

    page = await bus.request(topics.LEDGER_PAGE, PageRequest(limit=3))
    # The newest 3 are in span s1, so the page grows to its span.opened; only conversation.opened is older.
    assert [e.id for e in page.events] == [e.id for e in [*events[1:], sentinel]]
    assert page.cursor == Cursor(events[1].ts, events[1].id).encode()
    older = await bus.request(topics.LEDGER_PAGE, PageRequest(before=page.cursor))
    assert [e.id for e in older.events] == [events[0].id] and older.cursor is None

    query = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=seqs[9] or 0, limit=5))
    assert [e.seq for e in query.events] == seqs[10:15] and query.more
    assert query.last_seq == ledger.committed[-1].seq
    got = await bus.request(topics.LEDGER_GET, GetRequest(client_msg_id="client-3"))
    assert got.event is not None and got.event.payload["text"] == "q3"
    assert (await bus.request(topics.LEDGER_GET, GetRequest(id="nope"))).event is None

    state = await bus.request(topics.LEDGER_RESUME, ResumeRequest(turn_limit=3))
    assert state.conversation_id == "c1" and state.open_span is not None and state.open_span.id == events[1].id
    assert [t.payload["text"] for t in state.recent_turns] == ["q19", "a19", "after the duplicates"]
    assert state.last_response_id == "resp_19" and state.last_seq == ledger.committed[-1].seq


async def test_bad_input_is_dead_lettered_with_a_reason_and_good_events_flow_on(ledger: Running) -> None:
    bus = ledger.bus
    subject = topics.ledger_append("test").subject
    before = message("before the garbage", t=1)
    await bus.publish(topics.ledger_append("test"), before)
    await bus.js.publish(subject, b"{not json", headers={"Nats-Msg-Id": "bad-json"})
    unknown = json.dumps({"id": "u1", "ts": "2026-01-01T00:00:00.000000Z", "kind": "nope", "payload": {}})
    await bus.js.publish(subject, unknown.encode(), headers={"Nats-Msg-Id": "bad-kind"})
    mismatch = json.dumps({"id": "u2", "ts": "2026-01-01T00:00:00.000000Z", "kind": "message", "role": "user",
                           "payload": {"no_text": 1}})
    await bus.js.publish(subject, mismatch.encode(), headers={"Nats-Msg-Id": "bad-payload"})
    huge = message("x" * (MAX_EVENT_BYTES + 10), t=2)
    await bus.publish(topics.ledger_append("test"), huge)
    after = message("after the garbage", t=3)
    await bus.publish(topics.ledger_append("test"), after)

    await eventually(lambda: ledger.announced(after.id), "the good event behind the garbage")
    assert [e.id for e in ledger.committed] == [before.id, after.id]
    letters = await dead_letters(bus, 4)
    assert {d.consumer for d in letters} == {LEDGER_WRITER}
    assert {d.subject for d in letters} == {subject}
    reasons = sorted(d.reason for d in letters)
    assert sum(r.startswith("undecodable") for r in reasons) == 3, reasons
    oversized = [d for d in letters if d.reason.startswith("oversized")]
    assert len(oversized) == 1 and huge.id in oversized[0].reason and str(MAX_EVENT_BYTES) in oversized[0].reason
    assert oversized[0].size > MAX_EVENT_BYTES
    assert (await bus.request(topics.LEDGER_GET, GetRequest(id=huge.id))).event is None


@pytest.mark.parametrize("ledger", ["postgres"], indirect=True)
async def test_an_event_the_database_refuses_is_parked_and_its_batch_kept(ledger: Running) -> None:
    # PostgreSQL text cannot hold NUL: the batch fails, is retried event by event, and only
    # the refused event is dead-lettered.
    bus = ledger.bus
    good = [message(f"g{i}", t=i) for i in range(5)]
    poison = message("poison", t=2.5, id="poison\x00id")
    batch = [*good[:3], poison, *good[3:]]
    await asyncio.gather(*(
        bus.publish(topics.ledger_append("test"), e, msg_id=f"m-{i}") for i, e in enumerate(batch)
    ))
    await eventually(lambda: all(ledger.announced(e.id) for e in good), "the good events")
    letters = await dead_letters(bus, 1)
    assert len(letters) == 1 and letters[0].reason.startswith("the store refused event")
    assert not ledger.announced(poison.id)


async def test_malformed_cursors_and_requests_get_clear_errors(ledger: Running) -> None:
    bus = ledger.bus
    for cursor in ("garbage!", "", "djF8bm90LWEtZGF0ZXxpZA"):  # the last one: v1|not-a-date|id
        with pytest.raises(RemoteError) as caught:
            await bus.request(topics.LEDGER_PAGE, PageRequest(before=cursor))
        assert caught.value.code == "bad_cursor", cursor
    with pytest.raises(RemoteError) as caught:
        await bus.request(topics.LEDGER_GET, GetRequest())
    assert caught.value.code == "bad_request"
    # A request that does not even parse is refused by the bus helper.
    reply = await bus.nc.request(topics.LEDGER_PAGE.subject, b'{"limit": -4}', timeout=2)
    assert json.loads(reply.data)["error"]["code"] == "bad_request"


async def _raw(bus: Bus, subject: str, request: QueryRequest | PageRequest | ResumeRequest) -> bytes:
    """A request as the bus sends it, returning the reply's bytes (to measure them)."""
    reply = await bus.nc.request(subject, request.model_dump_json().encode(), timeout=10)
    assert len(reply.data) <= bus.nc.max_payload
    assert json.loads(reply.data)["error"] is None, reply.data[:300]
    return reply.data


@pytest.mark.parametrize("ledger", ["sqlite", "postgres"], indirect=True)
async def test_replies_of_big_events_fit_one_nats_message_and_walk_everything(ledger: Running) -> None:
    # 14 events of ~200 KiB (2.8 MB) against a 1 MB max_payload: no reply may carry them all.
    bus = ledger.bus
    big = "b" * (200 * 1024)
    events = [conversation_opened("c1", t=0), span_opened("s1", t=1)]
    for i in range(7):
        events.append(message(f"q{i}" + big, t=2 + 2 * i))
        events.append(message(f"a{i}" + big, role="assistant", response_id=f"resp_{i}", t=3 + 2 * i))
    for event in events:
        await bus.publish(topics.ledger_append("test"), event)
    await eventually(lambda: len(ledger.committed) >= len(events), "all announced")
    ids = [e.id for e in events]  # timeline order is publish order here

    # A gateway-like replay: query after_seq while more, each reply one NATS message.
    first = QueryReply.model_validate_json(
        await _raw(bus, topics.LEDGER_QUERY.subject, QueryRequest(after_seq=0, limit=5000))
    )
    assert first.more and 1 <= len(first.events) < len(events)
    replayed: list[Event] = []
    after = 0
    while True:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, limit=5000))
        replayed += reply.events
        if not reply.more:
            break
        after = reply.events[-1].seq or 0
    assert [e.id for e in replayed] == ids

    # "Load older" from the newest page back: every event once, in order, each page one message.
    pages: list[PageReply] = []
    cursor = None
    while True:
        page = PageReply.model_validate_json(await _raw(bus, topics.LEDGER_PAGE.subject, PageRequest(before=cursor)))
        assert page.events, "a cursor promised older events"
        pages.append(page)
        if page.cursor is None:
            break
        assert page.cursor == Cursor(page.events[0].ts, page.events[0].id).encode()
        cursor = page.cursor
    assert len(pages) > 1  # the one span was split by the byte budget, the pages join exactly
    assert [e.id for p in reversed(pages) for e in p.events] == ids

    # Resume: the oldest turns make way; the newest stay, oldest first, with the anchors.
    state = ResumeState.model_validate_json(
        await _raw(bus, topics.LEDGER_RESUME.subject, ResumeRequest(turn_limit=20))
    )
    turns = [e.id for e in events if e.kind == "message"]
    assert 1 <= len(state.recent_turns) < len(turns)
    assert [t.id for t in state.recent_turns] == turns[-len(state.recent_turns):]
    assert state.last_assistant is not None and state.last_response_id == "resp_6"
    assert state.open_span is not None and state.open_span.id == events[1].id


async def test_a_batch_slower_than_ack_wait_is_kept_in_progress_and_committed_once(
    start_ledger: StartLedger,
) -> None:
    # The writer waits on a database lock held by the test (within SQLite's 5 s busy timeout)
    # three times as long as ack_wait. Without in_progress JetStream would deliver the batch
    # again meanwhile: a redelivery, and duplicate work for the writer.
    ledger = await start_ledger("sqlite", ledger_ack_wait_seconds=1.0)
    bus = ledger.bus
    await ledger.halt()  # the streams and the database are there; the events wait in the stream,
    events = [message(f"slow {i}", t=i) for i in range(5)]
    for event in events:
        await bus.publish(topics.ledger_append("test"), event)
    held = sqlite3.connect(sqlite_path(ledger.settings.runtime_data_dir), isolation_level=None)
    try:
        held.execute("BEGIN IMMEDIATE")
        await ledger.start()  # ... so they come as one batch, which the writer cannot commit yet

        async def delivered() -> bool:
            info = await bus.js.consumer_info("LEDGER", LEDGER_WRITER)
            return (info.num_ack_pending or 0) >= len(events)

        await eventually(delivered, "the batch with the writer")
        await asyncio.sleep(3.0)  # the stimulus: a commit slower than ack_wait, not a proof
        held.execute("COMMIT")
    finally:
        held.close()
    await eventually(lambda: all(ledger.announced(e.id) for e in events), "the slow batch committed")
    info = await bus.js.consumer_info("LEDGER", LEDGER_WRITER)
    # Each message delivered once: as many deliveries as stream messages (a redelivery adds one).
    assert info.delivered is not None and (info.delivered.consumer_seq, info.delivered.stream_seq) == (5, 5)
    sentinel = message("sentinel", t=10)
    await bus.publish(topics.ledger_append("test"), sentinel)
    await eventually(lambda: ledger.announced(sentinel.id), "the sentinel")
    assert [e.id for e in ledger.committed] == [*(e.id for e in events), sentinel.id]


@pytest.mark.parametrize("ledger", ["sqlite", "postgres"], indirect=True)
async def test_out_of_range_numbers_and_unstorable_values_get_a_clear_error(ledger: Running) -> None:
    bus = ledger.bus
    await bus.publish(topics.ledger_append("test"), message("there is one", t=1))
    await eventually(lambda: len(ledger.committed) == 1, "one event")
    big = 2**63
    requests = [
        (topics.LEDGER_QUERY.subject, {"after_seq": big}),
        (topics.LEDGER_QUERY.subject, {"after_seq": 10**40}),
        (topics.LEDGER_QUERY.subject, {"after_seq": -1}),
        (topics.LEDGER_QUERY.subject, {"through_seq": big}),
        (topics.LEDGER_QUERY.subject, {"limit": big}),
        (topics.LEDGER_PAGE.subject, {"limit": big}),
        (topics.LEDGER_RESUME.subject, {"turn_limit": big}),
        # Not numbers, but as unstorable in a query: PostgreSQL text cannot hold NUL.
        (topics.LEDGER_QUERY.subject, {"conversation_id": "c\x00"}),
        (topics.LEDGER_QUERY.subject, {"kinds": ["message\x00"]}),
        (topics.LEDGER_GET.subject, {"id": "e\x00"}),
        (topics.LEDGER_GET.subject, {"client_msg_id": "m\x00"}),
    ]
    for subject, body in requests:
        reply = json.loads((await bus.nc.request(subject, json.dumps(body).encode(), timeout=5)).data)
        if body in ({"id": "e\x00"}, {"client_msg_id": "m\x00"}, {"conversation_id": "c\x00"},
                    {"kinds": ["message\x00"]}) and ledger.settings.database_url is None:
            assert reply["error"] is None, (body, reply)  # SQLite stores NUL: simply nothing matches
            continue
        assert reply["error"] is not None and reply["error"]["code"] == "bad_request", (body, reply)
    # The largest seq there is is a fine question: nothing after it.
    answer = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=big - 1, through_seq=big - 1))
    assert answer.events == [] and answer.last_seq == ledger.committed[0].seq
    assert (await bus.ping("ledger")).ready
