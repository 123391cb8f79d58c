"""Splitting a long SMS: every part fits (in Twilio's UTF-16 units), breaks fall after
sentences where there are any, and no character but the whitespace at a break is lost."""

import itertools

import pytest

from delegate.contracts.channels import SMS_BODY_LIMIT
from delegate.pollers.sms_split import split_sms, units


def _kept(text: str, parts: list[str]) -> bool:
    return "".join("".join(parts).split()) == "".join(text.split())


def test_a_short_text_is_one_part_trimmed() -> None:
    assert split_sms("  Hello there.  ") == ["Hello there."]
    assert split_sms("   ") == []


def test_breaks_fall_after_sentences_and_quotes_stay_with_theirs() -> None:
    text = 'He said "stop." Then he left! Did he? Yes… finally.'
    parts = split_sms(text, limit=20)
    assert parts == ['He said "stop."', "Then he left!", "Did he? Yes…", "finally."]
    assert _kept(text, parts)


def test_sentences_are_packed_greedily_under_the_limit() -> None:
    text = " ".join(f"Sentence number {n} is here." for n in range(300))
    parts = split_sms(text)
    assert len(parts) > 1
    assert all(units(p) <= SMS_BODY_LIMIT and p.endswith("is here.") for p in parts)
    for part, following in itertools.pairwise(parts):  # greedy: the next sentence did not fit
        assert units(part) + 1 + units(following.split(". ")[0] + ".") > SMS_BODY_LIMIT
    assert " ".join(parts) == text


def test_a_sentence_longer_than_the_limit_is_split_at_words_then_hard() -> None:
    words = " ".join(f"word{n}" for n in range(600))  # one 4,000-character "sentence"
    long_word = "x" * 3500
    text = f"Short start. {words} {long_word} tail."
    parts = split_sms(text)
    assert all(0 < units(p) <= SMS_BODY_LIMIT for p in parts)
    assert parts[0] == "Short start."
    assert all(not p.startswith(" ") and not p.endswith(" ") for p in parts)
    assert _kept(text, parts)
    assert max(len(p) for p in parts if set(p) == {"x"}) == SMS_BODY_LIMIT


def test_characters_beyond_the_bmp_count_twice_and_are_never_cut_in_half() -> None:
    text = "😀" * 1000  # 2,000 UTF-16 units
    parts = split_sms(text)
    assert [units(p) for p in parts] == [1600, 400]
    assert "".join(parts) == text


@pytest.mark.parametrize("text", ["a\n\nb", "First line\nsecond line", "Ends with newline.\n"])
def test_line_breaks_end_a_sentence(text: str) -> None:
    parts = split_sms(text, limit=12)
    assert _kept(text, parts) and all(units(p) <= 12 for p in parts)
