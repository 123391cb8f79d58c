"""The per-turn prompt and the stand-in's reading of it: what the model is shown, what it answers."""

import json
from datetime import UTC, datetime

from delegate.inner_plane.memory import Episode
from delegate.inner_plane.prompts import MEMORY_INSTRUCTIONS
from delegate.memory.prompts import MARK, TURN_INSTRUCTIONS, turn_input
from delegate.memory.reconcile import Add, nominations, parse_answer, reconcile
from delegate.memory.records import FactRow, PendingTurn
from delegate.openai_standin import memory_writer

T0 = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def turn(text: str, answer: str | None = "Noted.", channel: str = "text") -> PendingTurn:
    return PendingTurn(
        turn_id="t1", seq=7, ts=T0, conversation_id="c", span_id="s", channel=channel, text=text, answer_text=answer,
    )


def known(fact_id: str, text: str) -> FactRow:
    return FactRow(
        id=fact_id, type="fact", text=text, status="active", valid_at=T0, invalid_at=None, event_ids=("e0",),
        subject=None,
    )


def answer(text: str, candidates: list[FactRow]) -> list[dict[str, object]]:
    assert memory_writer.is_turn_request(TURN_INSTRUCTIONS) and not memory_writer.is_memory_request(TURN_INSTRUCTIONS)
    return parse_answer(memory_writer.write_turn(turn_input(turn(text), candidates)))


def test_the_prompt_shows_the_turn_its_answer_and_the_known_facts_with_their_ids() -> None:
    assert MARK in TURN_INSTRUCTIONS and "contradicts" in TURN_INSTRUCTIONS and "adaptation" in TURN_INSTRUCTIONS
    shown = turn_input(turn("My sister moved to Porto.", channel="sms"), [known("f1", "My sister lives in Lisbon.")])
    assert shown == (
        "KNOWN FACTS (id: text):\n- f1: My sister lives in Lisbon.\n\nTURN:\n"
        "[2026-05-01T12:00:00.000000Z] [sms] user: My sister moved to Porto.\n"
        "[2026-05-01T12:00:00.000000Z] [sms] assistant: Noted."
    )
    assert turn_input(turn("hi", answer=None), []) == (
        "KNOWN FACTS (id: text):\n(none)\n\nTURN:\n[2026-05-01T12:00:00.000000Z] [text] user: hi"
    )


def test_the_stand_in_nominates_the_fact_a_correction_replaces() -> None:
    lisbon, tea = known("f1", "My sister lives in Lisbon."), known("f2", "I prefer tea.")
    items = answer("Actually my sister moved to Porto.", [lisbon, tea])
    assert items == [{"type": "fact", "text": "My sister moved to Porto.", "subject": "sister", "contradicts": ["f1"]}]
    [change] = reconcile(nominations(items), [lisbon, tea], threshold=0.8, new_fact_id=lambda i: f"n{i}")
    assert isinstance(change, Add) and change.supersedes == ("f1",)


def test_the_stand_in_types_how_the_owner_wants_to_be_addressed_and_answered() -> None:
    items = answer("Call me Sam. Please keep your answers short. My dog is called Rex.", [])
    assert [(i["type"], i["text"]) for i in items] == [
        ("adaptation", "Call me Sam."),
        ("adaptation", "Please keep your answers short."),
        ("fact", "My dog is called Rex."),
    ]
    assert all(i["contradicts"] == [] for i in items)


def test_the_stand_in_answers_nothing_for_small_talk_and_questions() -> None:
    assert json.loads(memory_writer.write_turn(turn_input(turn("Hi! What time is it?"), []))) == {"items": []}


def test_the_stand_in_answers_the_checkpoint_with_an_episode() -> None:
    transcript = (
        "[2026-05-01T12:00:00Z] [text] user: My aunt keeps bees. Where can I buy a veil?\n"
        "[2026-05-01T12:00:05Z] [text] assistant: A garden shop.\n"
        "[2026-05-01T12:01:00Z] [sms] user: I will visit her on Sunday."
    )
    assert memory_writer.is_memory_request(MEMORY_INSTRUCTIONS)
    episode = Episode()
    episode.add(memory_writer.write(transcript, MEMORY_INSTRUCTIONS))
    assert episode.summary is not None and "My aunt keeps bees." in episode.summary and "sms, text" in episode.summary
    assert episode.decisions == ["I will visit her on Sunday."]
    assert episode.open_loops == ["Where can I buy a veil?"]
    assert [i["text"] for i in episode.items] == ["My aunt keeps bees.", "I will visit her on Sunday."]


def test_the_stand_in_nominates_people_and_promises_in_the_same_answer() -> None:
    shown = turn_input(turn("My sister Ana Costa moved to Porto. I'll send Ana the photos on Friday."), [])
    data = json.loads(memory_writer.write_turn(shown))
    assert data["people"] == [{"name": "Ana Costa", "relation": "sister"}]
    assert [i.get("people") for i in data["items"]] == [["Ana Costa"], ["Ana Costa"]]
    assert data["commitments"] == [{"by": "owner", "what": "send Ana the photos on Friday", "to": None, "due": None,
                                    "due_text": "send Ana the photos on Friday"}]
