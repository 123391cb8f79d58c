"""The thoughtflow_artifacts table: a run's newest picture, projected from thoughtflow.artifact
events in the writing transaction on every backend, and served on ledger.cmd.artifact."""

from datetime import datetime
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, ThoughtflowArtifact, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.messages import ArtifactRequest
from delegate.ledger.store import LedgerStore
from tests.support.waiting import eventually

from .builders import at, message
from .conftest import Running
from .test_store import rows
from .test_terms import _when

COLUMNS = "run_id, run_type, span_id, d2_path, svg_path, bytes, through_seq, error, created_at, event_id, seq"


def artifact(run_id: str, through_seq: int, *, t: float, svg: bool = True, **fields: Any) -> Event:
    folder = f"thoughtflow/{run_id}"
    payload = ThoughtflowArtifact(
        run_id=run_id, run_type=fields.pop("run_type", "task"), span_id=fields.pop("span_id", run_id),
        d2_path=f"{folder}/flow.d2", svg_path=f"{folder}/flow.svg" if svg else None,
        bytes=fields.pop("bytes", 1234 if svg else 0), through_seq=through_seq, steps=3, nodes=5,
        rendered_ms=42.5, **fields,
    )
    return make_event(payload, conversation_id=None, span_id=run_id, channel="inner", id=new_id(), ts=at(t))


def table(store: LedgerStore) -> dict[str, dict[str, Any]]:
    found = {}
    for row in rows(store, f"SELECT {COLUMNS} FROM thoughtflow_artifacts"):
        record = dict(zip(COLUMNS.split(", "), row, strict=True))
        record["created_at"] = _when(record["created_at"])
        found[record["run_id"]] = record
    return found


async def test_an_artifact_is_indexed_with_its_event_and_read_back(store: LedgerStore) -> None:
    event = artifact("task-1", 7, t=1)
    _, stored = await store.append([message("unrelated", t=0.5), event])
    assert table(store)["task-1"] == {
        "run_id": "task-1", "run_type": "task", "span_id": "task-1", "d2_path": "thoughtflow/task-1/flow.d2",
        "svg_path": "thoughtflow/task-1/flow.svg", "bytes": 1234, "through_seq": 7, "error": None,
        "created_at": at(1), "event_id": event.id, "seq": stored.seq,
    }
    found = await store.artifact("task-1")
    assert found is not None and (found.id, found.seq, found.kind) == (event.id, stored.seq, "thoughtflow.artifact")
    assert ThoughtflowArtifact.model_validate_json(found.payload_json) == event.typed(ThoughtflowArtifact)
    assert await store.artifact("no-such-run") is None


async def test_a_newer_picture_replaces_the_row_and_an_older_one_committed_late_does_not(store: LedgerStore) -> None:
    await store.append([artifact("run", 10, t=1)])
    newer = artifact("run", 20, t=2)
    await store.append([newer])
    assert table(store)["run"]["event_id"] == newer.id
    # A drawing of an earlier state of the run, committed after the newer one: the row stays.
    await store.append([artifact("run", 15, t=3)])
    assert table(store)["run"]["event_id"] == newer.id and table(store)["run"]["through_seq"] == 20
    # Drawn again over the same events (e.g. after a failed render): the later commit wins.
    failed = artifact("run", 20, t=4, svg=False, error="d2 exited 1: bad label")
    await store.append([failed])
    row = table(store)["run"]
    assert (row["event_id"], row["svg_path"], row["bytes"], row["error"]) == (
        failed.id, None, 0, "d2 exited 1: bad label")
    got = await store.artifact("run")
    assert got is not None and got.event().typed(ThoughtflowArtifact).error == "d2 exited 1: bad label"


async def test_within_one_batch_the_picture_covering_most_wins_and_runs_are_kept_apart(store: LedgerStore) -> None:
    a30, a10, b5 = artifact("a", 30, t=1), artifact("a", 10, t=2), artifact("b", 5, t=3, run_type="activation")
    await store.append([a30, a10, b5])
    got = table(store)
    assert (got["a"]["event_id"], got["b"]["event_id"], got["b"]["run_type"]) == (a30.id, b5.id, "activation")
    # A redelivered event changes nothing, even one that would win if it were new (an equal
    # through_seq): only the events a transaction newly stores are projected.
    c1, c2 = artifact("c", 8, t=4), artifact("c", 8, t=5)
    await store.append([c1])
    await store.append([c2])
    await store.append([c1])
    assert table(store)["c"]["event_id"] == c2.id


async def test_the_ledger_answers_the_newest_picture_of_a_run(ledger: Running) -> None:
    bus = ledger.bus
    first, second = artifact("act-1", 3, t=1, run_type="activation"), artifact("act-1", 9, t=2, run_type="activation")
    for event in (first, second):
        await bus.publish(topics.ledger_append("test"), event)
    await eventually(lambda: ledger.announced(second.id), "both committed")

    reply = await bus.request(topics.LEDGER_ARTIFACT, ArtifactRequest(run_id="act-1"))
    assert reply.artifact == second.typed(ThoughtflowArtifact)
    assert reply.event_id == second.id and reply.seq == ledger.committed[-1].seq
    assert isinstance(reply.created_at, datetime) and reply.created_at == at(2)
    assert (await bus.request(topics.LEDGER_ARTIFACT, ArtifactRequest(run_id="nothing-drawn"))).artifact is None


def test_an_artifact_path_outside_the_thoughtflow_folder_is_not_an_artifact() -> None:
    for path in ("/etc/passwd", "thoughtflow/../db/assistant.sqlite", "thoughtflow/x", "db/x/flow.svg",
                 "thoughtflow//flow.svg", "thoughtflow\\x\\flow.svg"):
        with pytest.raises(ValueError):
            ThoughtflowArtifact(run_id="r", run_type="task", d2_path="thoughtflow/r/flow.d2", svg_path=path)
    with pytest.raises(ValueError):
        ThoughtflowArtifact(run_id="../r", run_type="task", d2_path="thoughtflow/r/flow.d2")
