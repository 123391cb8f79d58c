"""The shared working-context builder's memory: its sections, imported history, and novelty."""

from datetime import UTC, datetime, timedelta

from delegate.contracts.events import Channel, ContextCapsule, Event, Imported, Message, make_event
from delegate.contracts.memory import MemoryResult
from delegate.runtime.memory_context import MemoryContext, Seen, normalize, search_request, split_novel
from delegate.runtime.working_context import (
    ADAPTATIONS_HEADING,
    MEMORY_HEADING,
    build_working_context,
    compose_instructions,
    select_recent_messages,
)

T0 = datetime(2026, 5, 1, 14, 3, tzinfo=UTC)


def msg(seq: int, text: str, *, imported: bool = False, channel: Channel = "text") -> Event:
    payload = Message(text=text, imported=Imported(import_id="imp-1", ref=f"r{seq}") if imported else None)
    return make_event(
        payload, conversation_id="c", span_id="s", channel=channel, role="user", ts=T0 + timedelta(minutes=seq)
    ).with_seq(seq)


def result(id: str, text: str, kind: str = "fact", **fields: object) -> MemoryResult:
    return MemoryResult.model_validate({"kind": kind, "id": id, "text": text, "score": 1.0, "ts": T0, **fields})


def test_memory_and_adaptations_are_sections_of_the_instructions_with_kind_date_and_source() -> None:
    memory = MemoryContext(
        items=[
            result("f1", "Her sister lives in Porto.", type="fact", channel="sms"),
            result("f2", "Prefers  tea\nover coffee.", type="preference"),
            result("m1", "We talked about the Lisbon trip", kind="message", channel="phone", speaker="Ana"),
            result("e1", "Planned the trip; open: book the hotel", kind="episode", refs=["dia-3"]),
        ],
        adaptations=[result("a1", "Call me Ana, and keep answers short.", type="adaptation")],
    )
    text = compose_instructions("BASE", capsule=None, channel="text", now=T0, memory=memory)
    assert text.startswith("BASE")
    assert text.index(ADAPTATIONS_HEADING) < text.index(MEMORY_HEADING) < text.index("## Now")
    assert "- Call me Ana, and keep answers short." in text
    assert "- [fact · 2026-05-01 · SMS] Her sister lives in Porto. (id f1)" in text
    assert "- [preference · 2026-05-01] Prefers tea over coffee. (id f2)" in text  # whitespace folded
    assert "- [message · 2026-05-01 · phone call, Ana] We talked about the Lisbon trip" in text
    assert "- [episode · 2026-05-01 · imported] Planned the trip; open: book the hotel" in text
    assert "(id m1)" not in text  # only facts carry the id memory_forget takes


def test_no_memory_means_no_memory_sections() -> None:
    for memory in (None, MemoryContext()):
        text = compose_instructions("BASE", capsule=None, channel="text", now=T0, memory=memory)
        assert MEMORY_HEADING not in text and ADAPTATIONS_HEADING not in text
    adaptations_only = MemoryContext(adaptations=[result("a1", "Say 'du', not 'Sie'.")])
    text = compose_instructions("BASE", capsule=None, channel="text", now=T0, memory=adaptations_only)
    assert ADAPTATIONS_HEADING in text and MEMORY_HEADING not in text


def test_build_working_context_passes_memory_to_the_instructions_not_to_the_items() -> None:
    memory = MemoryContext(items=[result("f1", "Her sister lives in Porto.")])
    ctx = build_working_context("BASE", None, [msg(1, "hello")], channel="text", now=T0, memory=memory)
    assert "Porto" in ctx.instructions
    assert all("Porto" not in str(item) for item in ctx.items)  # never a user message


def test_imported_messages_are_never_recent_messages() -> None:
    # Imported late, so their seq is the highest: without the rule they would be "the newest".
    events = [msg(1, "said today"), msg(50, "imported from 2019", imported=True), msg(51, "also old", imported=True)]
    assert [t.text for t in select_recent_messages(events, None)] == ["said today"]


def test_normalize_ignores_markers_case_punctuation_and_spacing() -> None:
    assert normalize("[SMS · 2026-05-01 14:03 UTC]  My sister   lives in PORTO!") == "my sister lives in porto"


def test_novelty_by_id_by_verbatim_event_by_text_and_by_capsule() -> None:
    seen = Seen()
    seen.add("f1", "old fact")
    seen.add("msg-9", "[SMS · 2026-05-01 14:03 UTC] My sister moved to Porto.")
    seen.add_blob("**Established facts**\n- The owner's dentist is Dr. Silva, on Fridays.\n")
    items = [
        result("f1", "reworded but the same id"),
        result("m9", "my sister moved to porto", kind="message", event_ids=["msg-9"]),
        result("f2", "My sister moved to Porto"),  # the same words as a verbatim message
        result("f3", "The owner's dentist is Dr. Silva"),  # in the capsule
        result("f4", "Walks the dog at 7."),
        result("f5", "walks the dog at 7"),  # a duplicate inside the same answer
        result("f6", "dog"),  # short: not "in the capsule" because one word is
    ]
    novel, dropped = split_novel(items, seen)
    assert [i.id for i in novel] == ["f4", "f6"]
    assert dropped == [
        {"id": "f1", "why": "same_id"}, {"id": "m9", "why": "verbatim"}, {"id": "f2", "why": "same_text"},
        {"id": "f3", "why": "in_capsule"}, {"id": "f5", "why": "same_text"},
    ]
    assert seen.ids == {"f1", "msg-9"}  # what the model has is not changed by asking


def test_a_capsule_event_dedups_through_its_text() -> None:
    capsule = make_event(ContextCapsule(text="Ana prefers tea over coffee.", through_seq=3),
                         conversation_id="c", span_id=None, channel="inner")
    seen = Seen()
    seen.add_blob(str(capsule.payload["text"]))
    novel, _ = split_novel([result("f1", "Ana prefers tea over coffee")], seen)
    assert novel == []


def test_search_request_trims_and_skips_what_cannot_be_asked() -> None:
    assert search_request("   ", purpose="turn", budget_tokens=1500) is None
    assert search_request("hello", purpose="turn", budget_tokens=0) is None  # MEMORY_CONTEXT_TOKENS=0: off
    req = search_request(" where  does\nmy sister live ", purpose="voice", budget_tokens=900,
                         exclude_event_ids=["a", "b", "a", ""] + [f"x{i}" for i in range(600)])
    assert req is not None
    assert (req.query, req.purpose, req.budget_tokens) == ("where does my sister live", "voice", 900)
    assert len(req.exclude_event_ids) == 500 and req.exclude_event_ids[-1] == "x599"
