"""Outgoing SMS go with Twilio's ``SmartEncoded``: one curly quote, dash or ellipsis (a model
writes them often) makes a whole SMS UCS-2, 70 characters a segment instead of 160 (67 instead
of 153 when split), so a reply costs two or three times the segments. Twilio replaces such
characters with GSM-7 lookalikes when nothing else in the body needs Unicode.

Whether Twilio's Message resource then shows the body we sent or the replaced one is not
documented; a sender that looks for an earlier attempt's message by its body (``sms_sender``)
compares both folded the same way, so either finds it.
"""

# The replacements Twilio's Smart Encoding is documented to make: curly quotes, dashes, the
# ellipsis and unusual spaces.
_LOOKALIKES = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'", "\u2032": "'",
    "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"', "\u2033": '"', "\u00ab": '"', "\u00bb": '"',
    "\u2010": "-", "\u2011": "-", "\u2012": "-", "\u2013": "-", "\u2014": "-", "\u2015": "-", "\u2212": "-",
    "\u2026": "...",
    "\u00a0": " ", "\u2002": " ", "\u2003": " ", "\u2009": " ", "\u200a": " ", "\u202f": " ", "\u205f": " ",
})


def same_body(at_twilio: str | None, part: str) -> bool:
    """Whether a Message's body at Twilio is ``part`` as we sent it, smart-encoded or not."""
    return at_twilio is not None and at_twilio.translate(_LOOKALIKES) == part.translate(_LOOKALIKES)
