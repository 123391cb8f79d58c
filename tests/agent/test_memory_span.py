"""What a turn's requests are given: its own search, late novel results joining the next request."""

from datetime import UTC, datetime

from delegate.agent.prompts import user_item
from delegate.agent.retrieval import SpanMemory, TurnMemory, item_text
from delegate.contracts.memory import MemoryResult

T0 = datetime(2026, 5, 1, tzinfo=UTC)


def fact(id: str, text: str, type: str = "fact") -> MemoryResult:
    return MemoryResult.model_validate({"kind": "fact", "id": id, "text": text, "score": 1.0, "ts": T0, "type": type})


def test_late_results_join_the_next_request_once_and_count_as_given() -> None:
    span = SpanMemory("s1")
    turn = TurnMemory(span)
    turn.give([fact("f1", "Bike: Brompton")], [fact("a1", "Be brief", "adaptation")])
    first = turn.context()
    assert [i.id for i in first.items] == ["f1"] and [a.id for a in first.adaptations] == ["a1"]

    span.pending_items.append(fact("f2", "Lives in Porto"))  # a late search's novel item
    second = turn.context()  # the tool round's continuation
    assert [i.id for i in second.items] == ["f1", "f2"]
    assert span.pending_items == [] and {"f1", "f2", "a1"} <= span.given.ids

    next_turn = TurnMemory(span)
    assert not next_turn.context()  # nothing left pending: given once, to one request


def test_the_same_item_twice_is_given_once() -> None:
    turn = TurnMemory(SpanMemory("s1"))
    turn.give([fact("f1", "x"), fact("f1", "x")], [])
    turn.give([fact("f1", "x")], [])
    assert [i.id for i in turn.context().items] == ["f1"]


def test_the_query_is_the_user_items_text() -> None:
    assert item_text(user_item("Where does my sister live?")) == "Where does my sister live?"
    assert item_text({"type": "message", "role": "assistant", "content": "plain"}) == "plain"
