"""Phone numbers as Twilio sends them (E.164) and as people type them (spaces, dashes, 00)."""

import re

_SEPARATORS = re.compile(r"[\s\-().]")
_E164 = re.compile(r"\+[1-9][0-9]{5,14}")


def e164(raw: str) -> str | None:
    """``raw`` in E.164 (``+`` and 6 to 15 digits), or None when it is not a phone number.

    Deliberately small: separators go, a leading ``00`` (the international call prefix in most
    of the world) becomes ``+``. National numbers without a country code are not guessed at,
    so an OWNER_PHONE like ``555 0101`` is refused at startup instead of never matching.
    """
    number = _SEPARATORS.sub("", raw)
    if number.startswith("00"):
        number = "+" + number[2:]
    return number if _E164.fullmatch(number) else None


def same_number(a: str, b: str) -> bool:
    """Both parse as phone numbers and are the same one."""
    left, right = e164(a), e164(b)
    return left is not None and left == right
