"""When two wordings state the same fact: the deduplicator's measure, decided in code.

Exact: equal once case, punctuation and spacing are set aside. Near: the token-set
Jaccard of the two word sets reaches a threshold ("My sister lives in Lisbon" and "my
sister lives in Lisbon, Portugal" are one fact; "... in Lisbon" and "... in Porto" are
not: a differing word weighs a lot in a short sentence, which is what keeps two different
values of the same attribute apart).
"""

import re
import unicodedata

# "sister's" and "sisters" stay distinct words; a stray apostrophe does not.
_WORD = re.compile(r"\w+(?:['’]\w+)*")


def normalize(text: str) -> str:
    """The comparable form of a statement: NFKC, lower case, words joined by single spaces."""
    folded = unicodedata.normalize("NFKC", text).lower().replace("’", "'")
    return " ".join(_WORD.findall(folded))


def tokens(text: str) -> frozenset[str]:
    return frozenset(normalize(text).split())


def similarity(a: str, b: str) -> float:
    """1.0 for an exact duplicate, else the Jaccard index of the two word sets (0..1)."""
    na, nb = normalize(a), normalize(b)
    if not na or not nb:
        return 0.0
    if na == nb:
        return 1.0
    ta, tb = frozenset(na.split()), frozenset(nb.split())
    return len(ta & tb) / len(ta | tb)


def is_duplicate(a: str, b: str, threshold: float) -> bool:
    return similarity(a, b) >= threshold
