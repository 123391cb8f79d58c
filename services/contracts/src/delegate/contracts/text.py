"""What counts as empty text, once for every route that takes text from the owner.

``str.strip()`` leaves zero-width spaces, joiners, a BOM and filler glyphs behind: a message
or a task goal of only those shows nothing, and is refused the same way wherever it comes in
(the error type ``empty_text``).
"""

import unicodedata
from collections.abc import Callable

from pydantic_core import PydanticCustomError

# Characters that draw nothing but that neither str.isspace() nor str.strip() know about:
# fillers that render as blank glyphs. Format characters (Cf: zero-width space/joiners, word
# joiner, BOM, soft hyphen, bidi marks) are caught by their category.
_BLANK_GLYPHS = frozenset("\u115f\u1160\u3164\uffa0\u2800")


def is_blank(text: str) -> bool:
    """True when the text shows nothing: only whitespace, control, format or filler characters."""
    return all(
        ch.isspace() or ch in _BLANK_GLYPHS or unicodedata.category(ch) in ("Cc", "Cf", "Zs", "Zl", "Zp")
        for ch in text
    )


def refuse_blank(what: str) -> Callable[[str], str]:
    """A validator (for ``AfterValidator``) refusing empty text as ``empty_text``: "the ``what`` is empty"."""

    def not_blank(text: str) -> str:
        if is_blank(text):
            raise PydanticCustomError("empty_text", f"the {what} is empty")
        return text

    return not_blank
