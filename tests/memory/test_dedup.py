"""The deduplicator's measure: exact and near duplicates, and what must stay apart."""

import pytest

from delegate.memory.dedup import is_duplicate, normalize, similarity


def test_normalized_text_sets_case_punctuation_and_spacing_aside() -> None:
    assert normalize("  My sister lives in LISBON!! ") == "my sister lives in lisbon"
    assert normalize("I’m vegetarian.") == normalize("i'm   vegetarian")
    assert normalize("...") == ""


def test_an_exact_duplicate_scores_one_whatever_its_punctuation() -> None:
    assert similarity("My sister lives in Lisbon.", "my sister lives in lisbon") == 1.0


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("My sister lives in Lisbon.", "My sister lives in Lisbon, Portugal."),
        ("I prefer short answers.", "I prefer short answers, please."),
    ],
)
def test_near_duplicates_reach_the_default_threshold(a: str, b: str) -> None:
    assert 0.8 <= similarity(a, b) < 1.0
    assert is_duplicate(a, b, 0.8)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("My sister lives in Lisbon.", "My sister lives in Porto."),  # another value of the same thing
        ("I have two cats.", "I have three cats."),
        ("I like tea.", "I like coffee."),
    ],
)
def test_different_values_of_one_attribute_are_not_duplicates(a: str, b: str) -> None:
    assert not is_duplicate(a, b, 0.8)


def test_empty_text_is_never_a_duplicate() -> None:
    assert similarity("", "") == 0.0
    assert similarity("!!", "my sister") == 0.0
