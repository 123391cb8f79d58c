"""The index on its own: events in, search and facts out. No bus: the projection is pure."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from delegate.contracts.events import Event, ImportFinished, ImportStarted
from delegate.contracts.memory import MemorySearchRequest
from delegate.memory.index import ApplyFailed, MemoryIndex, remove_files
from delegate.memory.ranking import search

from .builders import History

NOW = datetime(2024, 6, 20, 12, 0, tzinfo=UTC)


def index_with(path: Path, events: list[Event], batch: int = 3) -> MemoryIndex:
    index = MemoryIndex(path)
    for start in range(0, len(events), batch):
        index.apply_batch(events[start:start + batch])
    return index


def find(index: MemoryIndex, query: str, **fields: object) -> list[tuple[str, str]]:
    reply = search(index, MemorySearchRequest(query=query, now=NOW, **fields), NOW, 1500)
    return [(r.kind, r.text) for r in reply.results]


@pytest.fixture
def history() -> History:
    return make_history()


def make_history() -> History:
    h = History()
    said = h.say("my sister lives in Lisbon", ts=NOW - timedelta(days=40))
    h.say("Nice, Lisbon is lovely.", role="assistant", parent_id=said.id, ts=NOW - timedelta(days=40))
    h.fact("The owner's sister lives in Lisbon", [said], fact_id="f-sister", valid_at=NOW - timedelta(days=40))
    again = h.say("as I said, my sister lives in Lisbon", ts=NOW - timedelta(days=30))
    h.cite("f-sister", [again], text="sister lives in Lisbon")
    moved = h.say("actually my sister moved to Porto", ts=NOW - timedelta(days=2))
    h.fact("The owner's sister lives in Porto", [moved], fact_id="f-porto", supersedes=("f-sister",),
           valid_at=NOW - timedelta(days=2))
    secret = h.say("my bank PIN is 4711, keep it safe", ts=NOW - timedelta(days=5))
    h.fact("The owner's bank PIN is 4711", [secret], fact_id="f-pin", valid_at=NOW - timedelta(days=5))
    h.forget("f-pin")
    h.fact("Answer briefly, in German", [said], fact_id="f-style", type="adaptation")
    turns = [h.say("we planned the garden: tomatoes and basil", ts=NOW - timedelta(days=1))]
    h.episode("Planned the garden with tomatoes and basil.", turns, decisions=["plant in July"])
    return h


def test_facts_supersession_citations_and_history(tmp_path: Path, history: History) -> None:
    index = index_with(tmp_path / "i.sqlite", history.events)
    old, new = index.memory_fact("f-sister"), index.memory_fact("f-porto")
    assert old is not None and new is not None
    assert old.status == "superseded" and old.superseded_by == "f-porto"
    assert old.invalid_at == new.valid_at
    assert len(old.event_ids) == 2  # both statements, merged
    assert [c.kind for c in old.history] == ["superseded", "memory.fact.cited", "memory.fact.added"]
    assert new.status == "active" and new.supersedes == ["f-sister"]
    assert {f.id for f in index.active_facts()} == {"f-porto", "f-style"}
    assert [f.id for f in index.similar_facts("sister lives where", 5)] == ["f-porto"]


def test_a_retired_or_forgotten_fact_is_never_a_result(tmp_path: Path, history: History) -> None:
    index = index_with(tmp_path / "i.sqlite", history.events)
    results = find(index, "where does my sister live")
    facts = [text for kind, text in results if kind == "fact"]
    assert facts == ["The owner's sister lives in Porto"]
    assert results[0] == ("fact", "The owner's sister lives in Porto")
    # the owner still finds what was said, but never the forgotten fact
    assert ("message", "my bank PIN is 4711, keep it safe") in find(index, "bank PIN")
    assert not [r for r in find(index, "bank PIN") if r[0] == "fact"]
    # a model is never offered the forgotten fact's source turn either
    offered = find(index, "bank PIN 4711", purpose="turn")
    assert offered and not [text for _, text in offered if "4711" in text]


def test_for_a_model_adaptations_come_apart_and_the_budget_cuts(tmp_path: Path, history: History) -> None:
    index = index_with(tmp_path / "i.sqlite", history.events)
    first_turn = history.events[0].id
    req = MemorySearchRequest(query="sister Lisbon Porto", purpose="turn", budget_tokens=30,
                              exclude_event_ids=[first_turn], now=NOW)
    reply = search(index, req, NOW, 1500)
    assert [a.text for a in reply.adaptations] == ["Answer briefly, in German"]
    assert all(r.type != "adaptation" for r in reply.results)
    assert first_turn not in {r.id for r in reply.results}
    assert 0 < reply.tokens <= 30
    assert reply.results and reply.results[0].text == "The owner's sister lives in Porto"


def test_the_turns_a_model_carries_do_not_crowd_out_older_matches(tmp_path: Path) -> None:
    # More carried turns match (and match better) than a search reads candidates: they are
    # left out before that cut, so what the model does not have verbatim still comes back.
    h = History()
    h.say("the garden gate needs oil", ts=NOW - timedelta(days=9))
    carried = [h.say(f"garden garden note {i}", ts=NOW - timedelta(minutes=300 - i)) for i in range(250)]
    index = index_with(tmp_path / "i.sqlite", h.events, batch=50)
    req = MemorySearchRequest(query="garden", purpose="turn", exclude_event_ids=[e.id for e in carried], now=NOW)
    assert [r.text for r in search(index, req, NOW, 1500).results] == ["the garden gate needs oil"]


def test_episodes_and_time_expressions(tmp_path: Path, history: History) -> None:
    index = index_with(tmp_path / "i.sqlite", history.events)
    reply = search(index, MemorySearchRequest(query="garden plans", now=NOW), NOW, 1500)
    episode = next(r for r in reply.results if r.kind == "episode")
    assert "plant in July" in episode.text and len(episode.event_ids) == 1
    # "yesterday" picks the turn of yesterday over the same words a month ago
    h = History(start=len(history.events) + 1)
    h.conversation_id = history.conversation_id
    h.say("the dentist appointment went fine", ts=NOW - timedelta(days=30))
    h.say("the dentist appointment was moved", ts=NOW - timedelta(days=1))
    index.apply_batch(h.events)
    top = search(index, MemorySearchRequest(query="what about the dentist yesterday", now=NOW), NOW, 1500).results[0]
    assert top.text == "the dentist appointment was moved" and "time:yesterday" in top.why


def test_imported_speakers_refs_and_import_progress(tmp_path: Path) -> None:
    h = History()
    h.add(ImportStarted(import_id="imp1", format="ndjson", lines=3, conversations=1, events=3), channel="inner")
    may = datetime(2023, 5, 8, 10, tzinfo=UTC)
    h.imported("I adopted a dog named Rex", import_id="imp1", speaker="Caroline Smith", ref="D1:1", ts=may)
    h.imported("I adopted a cat last year", import_id="imp1", speaker="Melanie", ref="D1:2", ts=may)
    h.imported("Rex loves the beach", import_id="imp1", speaker="Caroline Smith", ref="D1:3",
               ts=datetime(2023, 9, 1, tzinfo=UTC))
    h.add(ImportFinished(import_id="imp1", status="done", events=3, conversations=1), channel="inner")
    index = index_with(tmp_path / "i.sqlite", h.events)
    status = index.import_status("imp1")
    assert status is not None and (status.status, status.events, status.indexed, status.total) == ("done", 3, 3, 3)
    req = MemorySearchRequest(query="What did Caroline adopt in May 2023?", now=NOW)
    results = search(index, req, NOW, 1500).results
    assert results[0].refs == ["D1:1"] and results[0].speaker == "Caroline Smith"
    assert "speaker:Caroline Smith" in results[0].why and "time:2023-05" in results[0].why


def test_pending_turns_for_extraction(tmp_path: Path) -> None:
    h = History()
    asked = h.say("I start at the new job on Monday")
    h.say("Congratulations!", role="assistant", parent_id=asked.id)
    other = h.say("and I need a haircut")
    h.say("an inner thought", channel="inner")
    h.imported("old chat", import_id="i", speaker="x", ref="r", ts=NOW)
    index = index_with(tmp_path / "i.sqlite", h.events)
    turns = index.pending_turns(10)
    assert [(t.turn_id, t.answered) for t in turns] == [(asked.id, True), (other.id, False)]
    assert turns[0].answer_text == "Congratulations!"
    h2 = History(start=len(h.events) + 1)
    h2.extracted_turns([h.events[0]])
    index.apply_batch(h2.events)
    assert [t.turn_id for t in index.pending_turns(10)] == [other.id]


def test_rebuild_gives_identical_results(tmp_path: Path, history: History) -> None:
    path = tmp_path / "i.sqlite"
    index = index_with(path, history.events, batch=2)
    queries = ["sister", "where does my sister live", "garden", "bank PIN", "Lisbon last month"]
    before = [search(index, MemorySearchRequest(query=q, now=NOW), NOW, 1500).results for q in queries]
    index.close()
    remove_files(path)
    rebuilt = index_with(path, history.events, batch=50)
    after = [search(rebuilt, MemorySearchRequest(query=q, now=NOW), NOW, 1500).results for q in queries]
    assert after == before and any(before)
    # replayed events (a catch-up overlapping what was applied) change nothing
    rebuilt.apply_batch(history.events)
    assert [search(rebuilt, MemorySearchRequest(query=q, now=NOW), NOW, 1500).results for q in queries] == before


def test_reopening_keeps_last_seq_and_a_bad_event_commits_what_came_before(tmp_path: Path) -> None:
    path = tmp_path / "i.sqlite"
    h = History()
    for n in range(5):
        h.say(f"message number {n}")
    index = index_with(path, h.events[:3])
    assert index.last_seq == 3
    index.close()
    reopened = MemoryIndex(path)
    assert reopened.last_seq == 3
    bad = h.events[4].model_copy(update={"payload": {"text": None}})  # not a Message payload
    with pytest.raises(ApplyFailed) as failed:
        reopened.apply_batch([h.events[3], bad])
    assert failed.value.event is bad and reopened.last_seq == 4
    assert reopened.counts()["messages"] == 4
    reopened.skip(bad)
    assert reopened.last_seq == 5
