"""Reconciliation as pure functions: duplicates are cited, corrections supersede by the code's rule."""

from datetime import UTC, datetime

from delegate.memory.reconcile import Add, Cite, Nomination, nominations, parse_answer, reconcile
from delegate.memory.records import FactRow

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def fact(fact_id: str, text: str, *, status: str = "active", events: tuple[str, ...] = ("e1",)) -> FactRow:
    return FactRow(
        id=fact_id, type="fact", text=text, status=status, valid_at=T0, invalid_at=None, event_ids=events,
        subject=None,
    )


def run(noms: list[Nomination], facts: list[FactRow], threshold: float = 0.8) -> list[Cite | Add]:
    return reconcile(noms, facts, threshold=threshold, new_fact_id=lambda i: f"new-{i}")


def test_an_exact_duplicate_is_cited_on_the_existing_fact() -> None:
    lisbon = fact("f1", "My sister lives in Lisbon.")
    changes = run([Nomination(0, "fact", "my sister lives in lisbon")], [lisbon])
    assert changes == [Cite(0, "f1", "my sister lives in lisbon", 1.0)]


def test_a_near_duplicate_is_cited_with_its_similarity() -> None:
    lisbon = fact("f1", "My sister lives in Lisbon.")
    [change] = run([Nomination(0, "fact", "My sister lives in Lisbon, Portugal.")], [lisbon])
    assert isinstance(change, Cite) and change.fact_id == "f1" and 0.8 <= change.similarity < 1


def test_a_new_fact_is_added_under_the_id_it_is_given() -> None:
    tea = Nomination(3, "preference", "I prefer tea.", subject="drinks")
    [change] = run([tea], [fact("f1", "My sister lives in Lisbon.")])
    assert change == Add(3, "new-3", "preference", "I prefer tea.", "drinks", ())


def test_a_correction_supersedes_the_nominated_active_fact() -> None:
    lisbon = fact("f1", "My sister lives in Lisbon.")
    [change] = run([Nomination(0, "fact", "My sister moved to Porto.", contradicts=("f1",))], [lisbon])
    assert isinstance(change, Add) and change.supersedes == ("f1",) and change.ignored == ()


def test_nominated_ids_the_rule_refuses_are_ignored_and_reported() -> None:
    old = fact("f-old", "My sister lives in Faro.", status="superseded")
    gone = fact("f-gone", "My sister lives in Braga.", status="forgotten")
    live = fact("f1", "My sister lives in Lisbon.")
    nom = Nomination(0, "fact", "My sister moved to Porto.", contradicts=("nope", "f-old", "f-gone", "new-0", "f1"))
    [change] = run([nom], [old, gone, live])
    assert isinstance(change, Add)
    assert change.supersedes == ("f1",)
    assert dict(change.ignored) == {"nope": "unknown", "f-old": "superseded", "f-gone": "forgotten", "new-0": "self"}


def test_a_near_duplicate_of_the_fact_it_corrects_is_a_correction_not_a_repeat() -> None:
    kids = fact("f1", "I have two kids at home now.")
    corrected = Nomination(0, "fact", "I have three kids at home now.", contradicts=("f1",))
    # Close enough to count as a repeat at 0.7, but the item says it replaces f1.
    [change] = run([corrected], [kids], threshold=0.7)
    assert isinstance(change, Add) and change.supersedes == ("f1",)
    # The same wording nominated as "contradicted" is still just a repeat.
    [same] = run([Nomination(0, "fact", "I have two kids at home now.", contradicts=("f1",))], [kids], threshold=0.7)
    assert isinstance(same, Cite) and same.fact_id == "f1"


def test_a_retired_fact_is_never_cited() -> None:
    old = fact("f1", "My sister lives in Lisbon.", status="superseded")
    [change] = run([Nomination(0, "fact", "My sister lives in Lisbon.")], [old])
    assert isinstance(change, Add) and change.supersedes == ()


def test_items_of_one_batch_see_each_other() -> None:
    lisbon = fact("f1", "My sister lives in Lisbon.")
    noms = [
        Nomination(0, "fact", "My sister moved to Porto.", contradicts=("f1",)),
        Nomination(1, "fact", "my sister moved to porto"),  # said twice in the turn
        Nomination(2, "fact", "My sister now lives in Porto.", contradicts=("f1",)),  # f1 is retired by now
    ]
    first, second, third = run(noms, [lisbon])
    assert isinstance(first, Add) and first.supersedes == ("f1",)
    assert second == Cite(1, "new-0", "my sister moved to porto", 1.0)
    assert isinstance(third, Add) and third.supersedes == () and dict(third.ignored) == {"f1": "superseded"}


def test_nominations_keep_usable_items_and_normalize_their_fields() -> None:
    items = [
        {"type": "adaptation", "text": "Call me Sam.", "subject": "name", "contradicts": ["f1", "f1", ""]},
        {"kind": "correction", "text": "  My sister  moved to Porto. "},  # the checkpoint prompt's kinds
        {"kind": "decision", "text": "We will meet on Friday."},
        {"type": "mystery", "text": "I own a boat.", "contradicts": "f2"},
        {"kind": "note", "text": "Offline stand-in: I heard you."},  # a non-JSON answer, not a fact
        {"type": "fact", "text": "   "},
        "not a dict",
    ]
    assert nominations(items) == [  # type: ignore[arg-type]  # "not a dict": a model's junk item, on purpose
        Nomination(0, "adaptation", "Call me Sam.", "name", ("f1",)),
        Nomination(1, "fact", "My sister moved to Porto."),
        Nomination(2, "commitment", "We will meet on Friday."),
        Nomination(3, "fact", "I own a boat.", None, ("f2",)),
    ]


def test_model_answers_are_parsed_leniently() -> None:
    assert parse_answer('```json\n{"items": [{"type": "fact", "text": "I live in Porto."}]}\n```') == [
        {"type": "fact", "text": "I live in Porto."}
    ]
    assert parse_answer('["I live in Porto."]') == [{"type": "fact", "text": "I live in Porto."}]
    assert parse_answer("Sorry, I can't help with that.") == []
    assert parse_answer('{"items": [{"type": "fact"}, 3]}') == []
    assert parse_answer("") == []
