"""``person.imported`` in the memory index (no processes): who a card is, what a re-import
replaces and keeps, and that a forgotten person's card makes nobody (issue #30)."""

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast
from zoneinfo import ZoneInfo

from delegate.contracts.events import (
    ContactsSynced,
    Event,
    InnerSignal,
    Payload,
    PersonAdded,
    PersonForgotten,
    PersonImported,
    PersonUnlisted,
    make_event,
)
from delegate.contracts.ids import utcnow
from delegate.memory.index import MemoryIndex
from delegate.memory.people_index import person_detail
from delegate.memory.projection_dates import batch_signal_id, unsent

BOOK = "http://dav.example/owner/contacts/"


class Index:
    def __init__(self, path: Path) -> None:
        self.index = MemoryIndex(path)
        self.seq = 0

    def apply(self, payload: Payload, event_id: str | None = None) -> Event:
        self.seq += 1
        event = make_event(payload, conversation_id=None, span_id=None, channel="inner", id=event_id).model_copy(
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


def test_a_deleted_card_takes_back_what_it_said_and_keeps_what_turns_said(tmp_path: Path) -> None:
    ix = Index(tmp_path / "index.sqlite")
    ix.apply(PersonAdded(person_id="p-ana", name="Ana Costa", relation="sister", emails=["ana.work@example.org"]))
    ix.apply(card())
    ix.apply(card(source="http://dav.example/owner/work/", contact_uid="ana-w", emails=["ana@example.org"],
                  phones=[], dates=[]))
    ix.apply(PersonUnlisted(source=BOOK, contact_uid="ana-1"))
    [ana] = ix.people()
    assert ana["phones"] == [] and ana["dates"] == []
    # the work book still lists her address; the turn's address was never the card's
    assert ana["emails"] == ["ana.work@example.org", "ana@example.org"]
    assert (ana["name"], ana["relation"], ana["status"]) == ("Ana Costa", "sister", "active")
    ix.apply(PersonUnlisted(source="http://dav.example/owner/work/", contact_uid="ana-w"))
    [ana] = ix.people()
    assert ana["emails"] == ["ana.work@example.org"]
    sources = ix.index.reader().execute("SELECT listed FROM person_sources").fetchall()
    assert [r[0] for r in sources] == [0, 0]
    # her card listed again gives its number back
    ix.apply(card(phones=["+15550004444"]))
    [ana] = ix.people()
    assert ana["phones"] == ["+15550004444"]


class CommitBetweenStatements:
    """A read connection on which the follower's thread commits just before the reply's second
    SELECT: where, on a busy index, another thread's commit can land."""

    def __init__(self, db: sqlite3.Connection, commit: Callable[[], object]) -> None:
        self.db = db
        self.commit: Callable[[], object] | None = commit
        self.selects = 0

    @property
    def in_transaction(self) -> bool:
        return self.db.in_transaction

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.lstrip().upper().startswith("SELECT"):
            self.selects += 1
            commit = self.commit
            if self.selects == 2 and commit is not None:
                self.commit = None
                commit()
        return self.db.execute(sql, params)


def test_a_person_read_while_the_follower_commits_shows_one_moment(tmp_path: Path) -> None:
    """Bruno's card deleted while his page is read: the page shows him before (listed, his card's
    number) or after (unlisted, no number), never no longer in contacts with the card's number
    still his, which the contacts test once saw."""
    ix = Index(tmp_path / "index.sqlite")
    ix.apply(card(contact_uid="bruno-1", name="Bruno Lima", phones=["+15550003333"], emails=[], dates=[]))
    [bruno] = ix.people()
    deleted = PersonUnlisted(source=BOOK, contact_uid="bruno-1")
    db = CommitBetweenStatements(ix.index.reader(), lambda: ix.apply(deleted))
    shown = person_detail(cast(sqlite3.Connection, db), bruno["id"], now=utcnow(), zone=ZoneInfo("UTC"))
    assert db.commit is None, "the card's deletion was committed between two of the read's statements"
    assert shown is not None and (shown.contacts, shown.phones) == ("listed", ["+15550003333"])
    after = person_detail(ix.index.reader(), bruno["id"], now=utcnow(), zone=ZoneInfo("UTC"))
    assert after is not None and (after.contacts, after.phones) == ("unlisted", [])


def test_imported_birthdays_make_one_offer_per_import_and_never_again(tmp_path: Path) -> None:
    ix = Index(tmp_path / "index.sqlite")
    ix.apply(PersonAdded(person_id="p-bea", name="Bea Reis", dates=[{"label": "birthday", "date": "02-01"}]))
    ix.apply(card())
    ix.apply(card(contact_uid="bruno-1", name="Bruno Lima", phones=["+15550003333"], emails=[],
                  dates=[{"label": "birthday", "date": "07-30"}]))
    ix.apply(card(contact_uid="bea-1", name="Bea Reis", phones=[], emails=[],
                  dates=[{"label": "birthday", "date": "02-01"}]))  # offered when a turn said it
    synced = ix.apply(ContactsSynced(imported=3, birthdays=3))
    [offer] = unsent(ix.index.reader())
    assert offer.id == batch_signal_id(synced.id) and offer.payload.count == 2
    assert [(d.name, d.date) for d in offer.payload.dates] == [("Ana Costa", "1990-04-12"), ("Bruno Lima", "07-30")]
    # the offer raised and committed: no longer to raise; the same cards again offer nothing
    ix.apply(InnerSignal(source="contacts", signal_kind="person.dates", signal=offer.model_dump(mode="json")),
             event_id=offer.id)
    assert unsent(ix.index.reader()) == []
    ix.apply(card(phones=["+15550004444"]))
    ix.apply(ContactsSynced(imported=1, birthdays=1))
    assert unsent(ix.index.reader()) == []
