"""Split a long text into SMS bodies under Twilio's limit, at sentence boundaries when it can.

A small regex rather than a sentence-boundary library (pysbd, last released 2021): a split
point only has to be a plausible place to break a text message, and a wrong guess (after
"e.g.") moves a break, it loses nothing. What must hold is checked by the tests: every part
fits, no part is empty, and the parts hold every character of the text except the
whitespace at the breaks.

Length is counted as Twilio counts it, in UTF-16 code units, so a part full of emoji (two
units each) still fits.
"""

import re
from collections.abc import Callable, Iterable

from delegate.contracts.channels import SMS_BODY_LIMIT

# A sentence ends after . ! ? or … (with closing quotes or brackets) followed by whitespace;
# a line break always ends one.
_SENTENCE_END = re.compile(r"(?<=[.!?…])[\"'”’)\]]*\s+|\n\s*")
_SPACE = re.compile(r"\s+")


def units(text: str) -> int:
    """The text's length in UTF-16 code units (characters beyond the BMP count twice)."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def split_sms(text: str, limit: int = SMS_BODY_LIMIT) -> list[str]:
    """``text`` as parts of at most ``limit`` units: sentences packed greedily, a sentence too
    long for one part split at spaces, a word too long split anywhere."""
    if limit < 2:
        raise ValueError("limit must leave room for at least one character beyond the BMP")
    text = text.strip()
    if not text:
        return []
    if units(text) <= limit:
        return [text]
    return _pack(_pieces(text, _SENTENCE_END), limit, _split_long, keep_tail=False)


def _pack(items: Iterable[str], limit: int, split: Callable[[str, int], list[str]], *, keep_tail: bool) -> list[str]:
    """``items`` joined by spaces and packed greedily into parts of at most ``limit`` units. An item
    too long for one part becomes ``split``'s parts; with ``keep_tail`` the items after it may join
    its last part (a word's), else the next item starts a part of its own (a sentence's)."""
    parts: list[str] = []
    current = ""
    for item in items:
        if not item:
            continue
        if units(item) > limit:
            if current:
                parts.append(current)
            pieces = split(item, limit)
            if keep_tail:
                parts.extend(pieces[:-1])
                current = pieces[-1]
            else:
                parts.extend(pieces)
                current = ""
            continue
        joined = f"{current} {item}" if current else item
        if units(joined) <= limit:
            current = joined
        else:
            parts.append(current)
            current = item
    if current:
        parts.append(current)
    return parts


def _pieces(text: str, separator: re.Pattern[str]) -> list[str]:
    """The pieces between separators, each with its trailing separator's quotes kept."""
    pieces: list[str] = []
    start = 0
    for match in separator.finditer(text):
        # the separator may start with closing quotes that belong to the sentence before it
        end = match.start() + len(match.group(0)) - len(match.group(0).lstrip("\"'”’)]"))
        piece = text[start:end].strip()
        if piece:
            pieces.append(piece)
        start = match.end()
    tail = text[start:].strip()
    if tail:
        pieces.append(tail)
    return pieces


def _split_long(sentence: str, limit: int) -> list[str]:
    return _pack(_SPACE.split(sentence), limit, _hard_split, keep_tail=True)


def _hard_split(word: str, limit: int) -> list[str]:
    chunks: list[str] = []
    current, size = "", 0
    for char in word:
        weight = 2 if ord(char) > 0xFFFF else 1
        if size + weight > limit:
            chunks.append(current)
            current, size = "", 0
        current += char
        size += weight
    chunks.append(current)
    return chunks
