"""``person.imported`` in the memory index (no processes): who a card is, what a re-import
replaces and keeps, and that a forgotten person's card makes nobody (issue #30)."""

import json
from pathlib import Path
from typing import Any

from delegate.contracts.events import Event, Payload, PersonAdded, PersonForgotten, PersonImported, make_event
from delegate.memory.index import MemoryIndex

BOOK = "http://dav.example/owner/contacts/"


class Index:
    def __init__(self, path: Path) -> None:
        self.index = MemoryIndex(path)
        self.seq = 0

    def apply(self, payload: Payload) -> Event:
        self.seq += 1
        event = make_event(payload, conversation_id=None, span_id=None, channel="inner").model_copy(
            update={"seq": self.seq})
        self.index.apply_batch([event])
        return event

    def people(self) -> list[dict[str, Any]]:
        rows = self.index.reader().execute("SELECT * FROM people ORDER BY seq").fetchall()
        return [{k: json.loads(v) if k in ("aliases", "phones", "emails", "dates") else v for k, v in dict(r).items()}
                for r in rows]


def card(**fields: Any) -> PersonImported:
    base: dict[str, Any] = {"source": BOOK, "contact_uid": "ana-1", "name": "Ana Costa", "phones": ["+15550002222"],
                            "emails": ["ana@example.org"], "dates": [{"label": "birthday", "date": "1990-04-12"}]}
    return PersonImported(**{**base, **fields})


def test_a_card_is_the_person_with_its_number_and_a_reimport_replaces_only_what_the_card_said(tmp_path: Path) -> None:
    ix = Index(tmp_path / "index.sqlite")
    ix.apply(PersonAdded(person_id="p-ana", name="Ana", relation="sister", phones=["+1 555 000 2222"],
                         emails=["ana.work@example.org"]))
    ix.apply(card())
    [ana] = ix.people()
    assert ana["id"] == "p-ana" and ana["relation"] == "sister"  # matched by phone, not a second Ana
    assert ana["emails"] == ["ana.work@example.org", "ana@example.org"]
    assert ana["dates"] == [{"label": "birthday", "date": "1990-04-12"}]

    ix.apply(card(phones=["+15550004444"], emails=["ana@example.org"]))  # her number changed on the phone
    [ana] = ix.people()
    # the turn's number (the same digits as the card's old one) goes with it; the work address stays
    assert ana["phones"] == ["+15550004444"]
    assert ana["emails"] == ["ana.work@example.org", "ana@example.org"]

    again = ix.apply(card(phones=["+15550004444"], emails=["ana@example.org"]))
    assert [p["id"] for p in ix.people()] == ["p-ana"], "the same card again makes nobody new"
    assert again.kind == "person.imported"


def test_a_new_card_is_a_new_person_and_a_forgotten_ones_card_makes_nobody(tmp_path: Path) -> None:
    ix = Index(tmp_path / "index.sqlite")
    ix.apply(card(contact_uid="bruno-1", name="Bruno Lima", phones=["+15550003333"], emails=[], dates=[]))
    ix.apply(card(contact_uid="bruno-1", name="Bruno Lima", phones=["+15550003333"], emails=[], dates=[]))
    [bruno] = ix.people()
    assert bruno["name"] == "Bruno Lima" and bruno["phones"] == ["+15550003333"]
    ix.apply(PersonForgotten(person_id=bruno["id"]))
    ix.apply(card(contact_uid="bruno-1", name="Bruno Lima", phones=["+15550009999"], emails=[], dates=[]))
    [gone] = ix.people()
    assert gone["status"] == "forgotten" and gone["phones"] == ["+15550003333"]
