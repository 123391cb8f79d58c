"""From the owner's (or a turn's) words to an FTS5 query: content words, OR-ed, each quoted so
no FTS syntax in user text (``NEAR``, ``*``, ``"``, ``-``, column filters) ever takes effect."""

import re

WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)?", re.UNICODE)

# Question and function words: they match nearly every turn and only dilute BM25.
STOPWORDS = frozenset({
    "a", "about", "above", "after", "again", "against", "all", "am", "an", "and", "any", "are", "aren", "as",
    "at", "be", "because", "been", "before", "being", "below", "between", "both", "but", "by", "can",
    "cannot", "could", "couldn", "did", "didn", "do", "does", "doesn", "doing", "don", "down", "during",
    "each", "few", "for", "from", "further", "get", "got", "had", "hadn", "has", "hasn", "have", "haven",
    "having", "he", "her", "here", "hers", "herself", "him", "himself", "his", "how", "i", "if", "in", "into",
    "is", "isn", "it", "its", "itself", "just", "let", "me", "more", "most", "much", "my", "myself", "no",
    "nor", "not", "now", "of", "off", "on", "once", "only", "or", "other", "ought", "our", "ours",
    "ourselves", "out", "over", "own", "same", "shall", "she", "should", "shouldn", "so", "some", "such",
    "than", "that", "the", "their", "theirs", "them", "themselves", "then", "there", "these", "they", "this",
    "those", "through", "to", "too", "under", "until", "up", "very", "was", "wasn", "we", "were", "weren",
    "what", "when", "where", "which", "while", "who", "whom", "whose", "why", "will", "with", "won", "would",
    "wouldn", "you", "your", "yours", "yourself", "yourselves", "ever", "also", "tell", "told", "say", "said",
    "know", "think", "thing", "things", "like", "really", "yes", "yeah", "ok", "okay", "oh", "hey", "hi", "s",
    "t", "d", "ll", "m", "re", "ve", "remember", "recall", "anything", "something", "last", "ago",
})

MAX_TERMS = 24


def words(text: str) -> list[str]:
    return [w.lower().replace("’", "'") for w in WORD.findall(text)]


def content_terms(text: str) -> list[str]:
    """The query's content words, in order, once each (its words if it has no others)."""
    all_words = [w.split("'")[0] for w in words(text)]
    kept = [w for w in all_words if w and w not in STOPWORDS]
    return list(dict.fromkeys(kept or [w for w in all_words if w]))[:MAX_TERMS]


def fts_query(text: str, exclude: frozenset[str] = frozenset()) -> str | None:
    """``"w1" OR "w2" …`` for FTS5 MATCH, or None when nothing is left to search for."""
    terms = [t for t in content_terms(text) if t not in exclude]
    if not terms:
        return None
    return " OR ".join(quoted(t) for t in terms)


def quoted(term: str) -> str:
    """An FTS5 string: whatever the term holds, it is only ever words to match."""
    return '"' + term.replace('"', '""') + '"'



_SUFFIXES = ("ingly", "edly", "ing", "ies", "ied", "ed", "es", "ly", "s")


def stem(word: str) -> str:
    """A crude stem, enough to say whether a result contains a query word ("lives" ~ "live")."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: -len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


class Coverage:
    """The share of the query's content words a text contains (a word starting with their stem)."""

    def __init__(self, terms: list[str]) -> None:
        self.patterns = [re.compile(r"\b" + re.escape(stem(t)), re.IGNORECASE) for t in terms]

    def __call__(self, text: str) -> float:
        if not self.patterns:
            return 0.0
        return sum(1 for p in self.patterns if p.search(text)) / len(self.patterns)
