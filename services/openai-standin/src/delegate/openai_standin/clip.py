"""Shortening an answer without cutting a word in half or leaving markdown open.

The offline demo quotes the user and fits text into limits (a note title, the capsule's
length). A cut lands on a sentence end when one is near the limit, else between words;
a code span or link the cut would split is dropped whole, an open `**` is closed, and an
open code fence gets its closing fence, so the rest of the page renders as before."""

from dataclasses import dataclass

ELLIPSIS = "…"
FENCE = "```"
# The characters the client's renderer (and CommonMark) lets a backslash make literal;
# enough of them to keep quoted words from opening emphasis, code or a link.
_ESCAPED = frozenset("\\`*_[]~")
# A sentence end this close to the limit is a better cut than the last word boundary.
_SENTENCE_REACH = 0.6


def escape(text: str) -> str:
    """Someone else's words inside our markdown: inert, so they open no emphasis or code."""
    return "".join("\\" + c if c in _ESCAPED else c for c in text)


def one_line(text: str) -> str:
    return " ".join(text.split())


def shorten(text: str, limit: int, *, markdown: bool = True) -> str:
    """At most `limit` characters of `text`: unchanged if it fits, else cut at a sentence
    end or between words, with `…` where words were left out and markdown balanced.

    `markdown=False` is for words that are data, not markup (a quote that will be escaped,
    a note's title): cut between words only, always marked with `…`."""
    if len(text) <= limit:
        return text
    if limit < len(ELLIPSIS):
        return ""
    if not markdown:
        ends = _word_ends(text, limit - len(ELLIPSIS))
        return text[: ends[0]] + ELLIPSIS if ends else ELLIPSIS
    reach = int(limit * _SENTENCE_REACH)
    for cut in _sentence_ends(text, limit):
        if cut < reach:
            break
        fitted = _fit(text[:cut], ended=True)
        if fitted is not None and len(fitted) <= limit:
            return fitted
    for cut in _word_ends(text, limit):
        fitted = _fit(text[:cut], ended=False)
        if fitted is not None and len(fitted) <= limit:
            return fitted
    return ELLIPSIS


@dataclass(frozen=True)
class Openings:
    """Markdown that a prefix of a text leaves open."""

    fence: bool = False
    bold: bool = False
    span_at: int | None = None  # where an unclosed code span starts
    link_at: int | None = None  # where an unclosed `[` starts


def openings(text: str) -> Openings:
    fence = bold = False
    span_at: int | None = None
    link_at: int | None = None
    i, n = 0, len(text)
    while i < n:
        at_line_start = i == 0 or text[i - 1] == "\n"
        if at_line_start and span_at is None and text.startswith(FENCE, i):
            fence = not fence
            end = text.find("\n", i)
            i = n if end < 0 else end  # the info string belongs to the fence line
            continue
        c = text[i]
        if fence:
            i += 1
        elif span_at is not None:  # inside a code span only a backtick means anything
            if c == "`":
                span_at = None
            i += 1
        elif c == "\\" and i + 1 < n and text[i + 1] in _ESCAPED:
            i += 2
        elif c == "`":
            span_at = i
            i += 1
        elif text.startswith("**", i):
            bold = not bold
            i += 2
        else:
            if c == "[" and link_at is None:
                link_at = i
            elif c == "]":
                link_at = None
            i += 1
    return Openings(fence, bold, span_at, link_at)


def _fit(head: str, *, ended: bool) -> str | None:
    """`head` closed off, or None when nothing of it is left."""
    head = head.rstrip()
    state = openings(head)
    if not state.fence:
        # A half code span or half link reads as garbage: leave it out whole.
        drop = min((at for at in (state.span_at, state.link_at) if at is not None), default=None)
        if drop is not None:
            while drop > 0 and not head[drop - 1].isspace():
                drop -= 1  # "foo`bar …": the word the span is glued to goes with it
            head = head[:drop].rstrip()
            state = openings(head)
            ended = False
    if not head.strip():
        return None
    if state.fence:
        return f"{head}\n{FENCE}\n{ELLIPSIS}"
    return head + ("" if ended else ELLIPSIS) + ("**" if state.bold else "")


def _sentence_ends(text: str, limit: int) -> list[int]:
    """Cut points just after `.`, `!`, `?` or at a line break, longest first."""
    ends = [i + 1 for i in range(min(limit, len(text) - 1)) if text[i] in ".!?" and text[i + 1].isspace()]
    ends += [i for i in range(1, min(limit, len(text) - 1) + 1) if text[i] == "\n"]
    return sorted(set(ends), reverse=True)


def _word_ends(text: str, limit: int) -> list[int]:
    """Cut points where whitespace follows, longest first: no word is split."""
    return [i for i in range(min(limit, len(text) - 1), 0, -1) if text[i].isspace() and not text[i - 1].isspace()]
