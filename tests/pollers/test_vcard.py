"""vCards to a person's parts (no processes): names from FN, N and every NICKNAME item, phones,
lower-cased emails, the birthday with or without a year; a card without a UID or name is refused."""

import pytest

from delegate.pollers.contacts.vcard import BadCard, birthday, parse


def card(*lines: str, version: str = "3.0") -> str:
    return "\r\n".join(["BEGIN:VCARD", f"VERSION:{version}", *lines, "END:VCARD"]) + "\r\n"


def test_a_card_gives_names_phones_emails_and_birthday() -> None:
    got = parse(card("UID:ana-1", "FN:Ana Costa", "N:Costa;Ana;;;", "NICKNAME:Aninha,Na\\,na",
                     "TEL;TYPE=CELL:+1 555 000 2222", "TEL;TYPE=HOME:+1 555 000 3333", "EMAIL:Ana@Example.ORG",
                     "BDAY:1990-04-12"))
    assert (got.uid, got.name) == ("ana-1", "Ana Costa")
    assert got.aliases == ["Aninha", "Na,na"]  # N spells the same name as FN: no alias of its own
    assert got.phones == ["+1 555 000 2222", "+1 555 000 3333"]
    assert got.emails == ["ana@example.org"]
    assert got.dates == [{"label": "birthday", "date": "1990-04-12"}]


def test_a_40_card_without_fn_year_or_nickname() -> None:
    got = parse(card("UID:b", "N:Lima;Bruno;;;", "BDAY:--0730", version="4.0"))
    assert (got.name, got.aliases, got.dates) == ("Bruno Lima", [], [{"label": "birthday", "date": "07-30"}])


@pytest.mark.parametrize(("raw", "want"), [("19900412", "1990-04-12"), ("--04-12", "04-12"),
                                           ("1990-04-12T00:00:00Z", "1990-04-12"), ("1990-13-01", None),
                                           ("April 12", None)])
def test_birthdays(raw: str, want: str | None) -> None:
    assert birthday(raw) == want


@pytest.mark.parametrize("text", [card("FN:No Uid"), card("UID:x"), "BEGIN:VEVENT\r\nUID:e\r\nEND:VEVENT\r\n",
                                  "not a card at all"])
def test_unusable_cards_are_refused(text: str) -> None:
    with pytest.raises(BadCard):
        parse(text)
