"""The code that decides who is who and when a promise is due (no processes)."""

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

from delegate.contracts.events import PersonMentioned
from delegate.memory.commitments import due_from, promises
from delegate.memory.linking import blocked_items, link
from delegate.memory.people import Known, Nominee, additions, nominees, resolve
from delegate.memory.prompts import TURN_INSTRUCTIONS, turn_input
from delegate.memory.records import PendingTurn

LISBON = ZoneInfo("Europe/Lisbon")
SUNDAY = datetime(2026, 12, 6, 10, 0, tzinfo=UTC)  # a Sunday


def known(pid: str, name: str, *, aliases: tuple[str, ...] = (), phones: tuple[str, ...] = (),
          emails: tuple[str, ...] = (), status: str = "active") -> Known:
    return Known(id=pid, name=name, aliases=list(aliases), phones=list(phones), emails=list(emails), status=status)


def test_identity_is_resolved_by_phone_then_email_then_exact_name_never_by_likeness() -> None:
    ana = known("p1", "Ana Costa", aliases=("Ana",), phones=("+351 912 345 678",), emails=("ana@ex.org",))
    ana_b = known("p2", "Ana Silva")
    people = [ana, ana_b]
    assert resolve(Nominee("Someone", phones=["+351912345678"]), people) is ana
    assert resolve(Nominee("Someone", emails=["ANA@ex.org"]), people) is ana
    assert resolve(Nominee("ana  costa!"), people) is ana
    assert resolve(Nominee("Ána"), people) is ana, "an alias, accents aside"
    assert resolve(Nominee("Silva"), people) is None, "a surname alone is not a name"
    assert resolve(Nominee("Anna Costa"), people) is None, "similar is not the same"
    # a first name alone: only when exactly one person has it
    assert resolve(Nominee("Ana"), [ana_b]) is ana_b
    assert resolve(Nominee("Ana"), [known("p3", "Ana Costa"), ana_b]) is None


def test_nominees_are_cleaned_and_only_what_is_new_is_added() -> None:
    [n] = nominees([{"name": " Bea ", "aliases": ["Bea", "Beatriz"], "phones": ["call me", "+1 555 000 1234"],
                     "emails": ["not-an-email", "Bea@Ex.org"], "dates": [{"label": "birthday", "date": "02-30x"},
                                                                         {"label": "birthday", "date": "03-14"}]},
                    {"name": ""}, "junk"])  # type: ignore[list-item]  # a model's junk item, on purpose
    assert (n.name, n.aliases, n.phones, n.emails) == ("Bea", ["Beatriz"], ["+1 555 000 1234"], ["bea@ex.org"])
    assert n.dates == [{"label": "birthday", "date": "03-14"}]
    person = known("p1", "Bea", phones=("+15550001234",))
    assert additions(n, person) == {"aliases": ["Beatriz"], "emails": ["bea@ex.org"],
                                    "dates": [{"label": "birthday", "date": "03-14"}]}


def test_due_dates_are_read_in_the_owners_zone_and_forward_from_the_turn() -> None:
    assert due_from("2026-12-11", None, SUNDAY, LISBON) == datetime(2026, 12, 11, 9, tzinfo=LISBON)
    assert due_from("2026-12-11T17:30", None, SUNDAY, LISBON) == datetime(2026, 12, 11, 17, 30, tzinfo=LISBON)
    assert due_from(None, "on Friday", SUNDAY, LISBON) == datetime(2026, 12, 11, 9, tzinfo=LISBON)
    assert due_from(None, "by Sunday", SUNDAY, LISBON) == datetime(2026, 12, 13, 9, tzinfo=LISBON), "next week's"
    assert due_from("garbage", "tonight", SUNDAY, LISBON) == datetime(2026, 12, 6, 20, tzinfo=LISBON)
    tokyo = ZoneInfo("Asia/Tokyo")  # 19:00 there on Sunday: "tomorrow" is Monday in Tokyo
    assert due_from(None, "tomorrow", SUNDAY.replace(hour=10), tokyo) == datetime(2026, 12, 7, 9, tzinfo=tokyo)
    assert due_from(None, "some day", SUNDAY, LISBON) is None
    [p] = promises([{"by": "Delegate", "what": " check  trains ", "due": None}, {"what": ""}], SUNDAY, LISBON)
    assert (p.by, p.what, p.due) == ("assistant", "check trains", None)


def test_facts_link_to_the_people_they_name_and_a_forgotten_person_blocks_items() -> None:
    ana = known("p1", "Ana Costa", aliases=("Ana",))
    gone = known("p9", "Bea", status="forgotten")
    items: list[dict[str, Any]] = [
        {"text": "Ana loves sailing."}, {"text": "The weather is nice."}, {"text": "Bea called.", "people": []}
    ]
    assert blocked_items(items, [ana, gone]) == {2}
    linked = link(source_id="x", raw_people=[{"name": "Bea"}], raw_commitments=[],
                  items=items, item_facts={0: "f0", 1: "f1"}, turn_ids=["t"], said_at=SUNDAY, zone=LISBON,
                  people=[ana, gone], open_commitments=[], threshold=0.8)
    kinds = [(p.KIND, getattr(p, "person_id", None), getattr(p, "fact_ids", None)) for _, p in linked.events]
    assert kinds == [("person.mentioned", "p1", ["f0"])], "Bea is never made again; Ana gets her fact"


def test_the_prompt_shows_the_owners_local_time_before_everything_else() -> None:
    turn = PendingTurn(turn_id="t", seq=1, ts=SUNDAY, conversation_id=None, span_id=None, channel="sms",
                       text="I'll send Ana the photos on Friday.", answer_text=None)
    shown = turn_input(turn, [], LISBON)
    assert shown.startswith("OWNER'S LOCAL TIME: Sunday 2026-12-06 10:00 (Europe/Lisbon)\n\nKNOWN FACTS")
    assert shown.endswith("user: I'll send Ana the photos on Friday.")
    assert '"commitments"' in TURN_INSTRUCTIONS and '"people"' in TURN_INSTRUCTIONS


def test_a_first_name_shared_by_two_people_links_a_fact_to_neither() -> None:
    costa, silva = known("p1", "Ana Costa"), known("p2", "Ana Silva")
    items: list[dict[str, Any]] = [{"text": "Ana loves sailing."}, {"text": "Ana Silva moved to Braga."}]
    linked = link(source_id="x", raw_people=[], raw_commitments=[], items=items, item_facts={0: "f0", 1: "f1"},
                  turn_ids=["t"], said_at=SUNDAY, zone=LISBON, people=[costa, silva], open_commitments=[],
                  threshold=0.8)
    mentioned = [p for _, p in linked.events if isinstance(p, PersonMentioned)]
    assert len(mentioned) == len(linked.events)
    assert [(p.person_id, p.fact_ids) for p in mentioned] == [("p2", ["f1"])]
