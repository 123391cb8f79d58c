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
    parts: list[str] = []
    current = ""
    for sentence in _pieces(text, _SENTENCE_END):
        if units(sentence) > limit:
            if current:
                parts.append(current)
                current = ""
            parts.extend(_split_long(sentence, limit))
            continue
        joined = f"{current} {sentence}" if current else sentence
        if units(joined) <= limit:
            current = joined
        else:
            parts.append(current)
            current = sentence
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
    parts: list[str] = []
    current = ""
    for word in _SPACE.split(sentence):
        if not word:
            continue
        if units(word) > limit:
            if current:
                parts.append(current)
                current = ""
            chunks = _hard_split(word, limit)
            parts.extend(chunks[:-1])
            current = chunks[-1]
            continue
        joined = f"{current} {word}" if current else word
        if units(joined) <= limit:
            current = joined
        else:
            parts.append(current)
            current = word
    if current:
        parts.append(current)
    return parts


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
