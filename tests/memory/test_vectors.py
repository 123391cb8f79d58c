"""The embedding ranker with the real model (the ``embeddings`` extra, offline): vectors are a
projection of the index's rows, so switching them on or off never changes an event."""

import os
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from delegate.contracts.memory import MemorySearchRequest
from delegate.memory import embedder
from delegate.memory.embedder import Embedder
from delegate.memory.index import MemoryIndex
from delegate.memory.ranking import search
from delegate.memory.settings import Settings
from delegate.memory.vectors import DenseVectors, VectorWorker
from tests.support.waiting import eventually_sync

from .builders import History
from .test_index import NOW, index_with

# Only in `make test-embeddings`, which installs the extra (torch, 1.3 GB); `make test` needs none of it.
pytestmark = pytest.mark.embeddings

# Not "Where does my sibling live?": porter stems "live" and "lives" alike, so full text finds that.
PARAPHRASE = "Which city is my sibling based in?"


@pytest.fixture(scope="module")
def model() -> Iterator[Embedder]:
    # No hub at run time: a download attempt would fail here instead of passing unnoticed.
    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield embedder.load()  # loaded once for the module: seconds
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved


def history() -> History:
    h = History()
    said = h.say("we talked about the weekend", ts=NOW - timedelta(days=3))
    h.fact("My sister lives in Lisbon", [said], fact_id="f-old", valid_at=NOW - timedelta(days=30))
    h.fact("My sister lives in Porto", [said], fact_id="f-sister", supersedes=("f-old",),
           valid_at=NOW - timedelta(days=3))
    h.fact("My brother lives in Madrid", [said], fact_id="f-brother", valid_at=NOW - timedelta(days=3))
    h.forget("f-brother")
    h.fact("The owner prefers tea over coffee", [said], fact_id="f-tea")
    h.say("the car needs new tyres before winter", ts=NOW - timedelta(days=1))
    return h


def texts(index: MemoryIndex, query: str, dense: DenseVectors | None, kind: str = "fact") -> list[str]:
    reply = search(index, MemorySearchRequest(query=query, now=NOW), NOW, 1500, dense)
    return [r.text for r in reply.results if r.kind == kind]


def test_the_model_loads_offline_from_the_package_and_is_deterministic(model: Embedder) -> None:
    assert embedder.missing() is None and os.environ["HF_HUB_OFFLINE"] == "1"
    a = model.encode(["My sister lives in Porto", PARAPHRASE])
    b = model.encode(["My sister lives in Porto", PARAPHRASE])
    assert a.dtype == np.float32 and a.shape == (2, model.dim) == (2, 384)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    assert np.allclose(a, b, atol=1e-6)
    assert float(a[0] @ a[1]) > 0.3  # related in meaning, without a word in common


def test_a_paraphrase_is_found_with_embeddings_and_not_without(tmp_path: Path, model: Embedder) -> None:
    index = index_with(tmp_path / "i.sqlite", history().events)
    assert texts(index, PARAPHRASE, None) == []  # no shared word: full text finds nothing
    dense = DenseVectors(index, model)
    dense.load_stored()
    assert dense.fill() == 4  # 2 active facts, 2 messages; retired facts get none
    assert texts(index, PARAPHRASE, dense)[0] == "My sister lives in Porto"
    reply = search(index, MemorySearchRequest(query=PARAPHRASE, now=NOW), NOW, 1500, dense)
    assert "meaning" in reply.results[0].why
    # the car turn is found by its meaning as well, and words still count as before
    assert texts(index, "vehicle maintenance", dense, "message") == ["the car needs new tyres before winter"]
    assert texts(index, "tea", dense)[0] == "The owner prefers tea over coffee"


def test_a_forgotten_or_superseded_fact_is_never_a_dense_result(tmp_path: Path, model: Embedder) -> None:
    index = index_with(tmp_path / "i.sqlite", history().events)
    dense = DenseVectors(index, model)
    dense.fill()
    # even with vectors for them in memory (as if embedded before they were retired)
    rows = dict(index.reader().execute("SELECT id, rowid FROM facts").fetchall())
    retired = ["My sister lives in Lisbon", "My brother lives in Madrid"]
    dense.matrices["fact"].put([rows["f-old"], rows["f-brother"]], model.encode(retired))
    for query in ["Lisbon", "Where does my brother live?", "sister Lisbon", *retired]:
        for purpose in ("owner", "turn"):
            req = MemorySearchRequest(query=query, now=NOW, purpose=purpose)
            found = [r.text for r in search(index, req, NOW, 1500, dense).results if r.kind == "fact"]
            assert not set(found) & set(retired), (query, purpose, found)


def test_switching_embeddings_needs_no_event_change_and_vectors_are_rebuilt(tmp_path: Path, model: Embedder) -> None:
    path = tmp_path / "i.sqlite"
    events = history().events
    index = index_with(path, events)
    last_seq = index.last_seq
    without = [search(index, MemorySearchRequest(query=q, now=NOW), NOW, 1500).results for q in ("sister", "tyres")]
    on = DenseVectors(index, model)
    on.fill()
    assert on.embedded_through_seq == last_seq
    stored = dict(index.reader().execute("SELECT kind || row, vec FROM vectors").fetchall())
    index.close()

    # off again: the same file, the full-text results exactly as before embeddings
    index = MemoryIndex(path)
    assert index.last_seq == last_seq
    assert [search(index, MemorySearchRequest(query=q, now=NOW), NOW, 1500).results
            for q in ("sister", "tyres")] == without
    # on again: the stored vectors are read back, nothing is embedded twice
    again = DenseVectors(index, model)
    assert again.load_stored() == 4 and again.fill() == 0
    assert texts(index, PARAPHRASE, again)[0] == "My sister lives in Porto"
    # vectors lost (or made by another model): rebuilt from the rows, identical, no event replayed
    index.reset_vectors("another/384")
    assert index.reader().execute("SELECT count(*) FROM vectors").fetchone()[0] == 0
    rebuilt = DenseVectors(index, model)
    assert rebuilt.load_stored() == 0 and rebuilt.fill() == 4
    assert index.last_seq == last_seq
    for key, vec in index.reader().execute("SELECT kind || row, vec FROM vectors"):
        assert np.allclose(np.frombuffer(vec, np.float32), np.frombuffer(stored[key], np.float32), atol=1e-5)
    assert texts(index, PARAPHRASE, rebuilt)[0] == "My sister lives in Porto"


def test_an_edited_fact_is_embedded_again(tmp_path: Path, model: Embedder) -> None:
    h = history()
    index = index_with(tmp_path / "i.sqlite", h.events)
    dense = DenseVectors(index, model)
    dense.fill()
    assert texts(index, "What does the owner drink?", dense)[0] == "The owner prefers tea over coffee"
    edit = History(start=index.last_seq + 1)
    edit.edit("f-tea", "The owner's favourite band is Queen")
    index.apply_batch(edit.events)
    assert dense.fill() == 1
    assert texts(index, "Which music does the owner like?", dense)[0] == "The owner's favourite band is Queen"


def test_the_service_worker_fills_in_the_background(tmp_path: Path, model: Embedder) -> None:
    index = index_with(tmp_path / "i.sqlite", history().events)
    worker = VectorWorker(index, lambda: model)
    worker.start()
    try:
        eventually_sync(lambda: worker.state == "ready", "the vector worker ready")
        assert worker.dense is not None
        assert worker.dense.embedded_through_seq == index.last_seq
        assert "4 vectors" in worker.detail()
    finally:
        worker.close()
        index.close()


def test_the_setting_is_off_by_default() -> None:
    assert Settings().memory_embeddings is False
    assert Settings(memory_embeddings=True).memory_embeddings is True
