"""The working context of a fresh model request, and how a new leader reads its conversation state."""

from datetime import UTC, datetime, timedelta

from delegate.agent.conversation_state import state_from_resume
from delegate.contracts.events import (
    Channel,
    ContextCapsule,
    ContextCompacted,
    Event,
    Message,
    Role,
    SpanOpened,
    make_event,
)
from delegate.contracts.messages import ResumeState
from delegate.runtime.working_context import (
    build_working_context,
    compose_instructions,
    select_recent_messages,
)

T0 = datetime(2026, 5, 1, 14, 3, tzinfo=UTC)


def msg(seq: int, text: str, role: Role = "user", channel: Channel = "text", **payload: object) -> Event:
    return make_event(
        Message(text=text, **payload), conversation_id="c", span_id="s", channel=channel, role=role,
        ts=T0 + timedelta(minutes=seq),
    ).with_seq(seq)


def capsule(seq: int, through: int | None, text: str = "Ana likes tea.") -> Event:
    return make_event(
        ContextCapsule(text=text, through_seq=through), conversation_id="c", span_id=None, channel="inner"
    ).with_seq(seq)


def test_messages_after_the_capsule_only_marked_with_channel_and_time() -> None:
    events = [msg(1, "old"), msg(2, "covered", "assistant"), msg(5, "hello by sms", channel="sms"),
              msg(6, "hi back", "assistant", channel="sms"), msg(7, "from the phone", channel="phone")]
    ctx = build_working_context("BASE", capsule(4, through=2), events, channel="text", now=T0)
    assert [m.text for m in ctx.messages] == ["hello by sms", "hi back", "from the phone"]
    assert ctx.items[0] == {
        "type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "[SMS · 2026-05-01 14:08 UTC] hello by sms"}],
    }
    assert ctx.items[1] == {"type": "message", "role": "assistant", "content": "[SMS · 2026-05-01 14:09 UTC] hi back"}
    assert ctx.items[2]["content"][0]["text"].startswith("[phone call · ")
    assert "Ana likes tea." in ctx.instructions and ctx.instructions.startswith("BASE")
    assert "never write such a marker" in ctx.instructions
    assert ctx.capsule_id is not None


def test_budgets_keep_the_newest_messages_whole_and_skip_excluded_and_empty_ones() -> None:
    events = [msg(i, f"message {i} " + "x" * 50) for i in range(1, 11)] + [msg(11, "   "), msg(12, "the new one")]
    chosen = select_recent_messages(events, None, max_messages=3, max_chars=10_000, exclude_ids=[events[-1].id])
    assert [m.seq for m in chosen] == [8, 9, 10]
    by_chars = select_recent_messages(events, None, max_messages=20, max_chars=200)
    assert [t.seq for t in by_chars] == [10, 12]  # a third whole message would not fit
    huge = select_recent_messages([msg(1, "y" * 5000)], None, max_chars=300)
    assert len(huge) == 1 and len(huge[0].marked_text) <= 300 and huge[0].text.endswith("…")


def test_no_capsule_no_messages_still_says_where_and_when() -> None:
    text = compose_instructions("BASE", capsule=None, channel="email", now=T0)
    assert "email" in text and "2026-05-01 14:03 UTC" in text and "capsule" not in text.lower()
    assert build_working_context("BASE", None, [], channel="text", now=T0).items == []


def resume(**fields: object) -> ResumeState:
    opened = make_event(SpanOpened(type="interaction"), conversation_id="c", span_id="s1", channel="sms").with_seq(1)
    return ResumeState(conversation_id="c", open_span=opened, **fields)


def test_resume_continues_the_chain_of_the_newest_text_answer() -> None:
    answer = msg(10, "ok", "assistant", response_id="resp_10")
    state = state_from_resume(resume(recent_turns=[msg(9, "hi"), answer], last_response_id="resp_10"))
    assert state.chain_id == "resp_10" and state.replacement is None
    assert state.span is not None and (state.span.id, state.span.channel) == ("s1", "sms")


def test_a_later_manual_compaction_replaces_the_chain_with_its_replacement_input() -> None:
    answer = msg(10, "ok", "assistant", response_id="resp_10")
    items = [{"type": "compaction", "id": "cmp_1", "encrypted_content": "x"}]
    compacted = make_event(
        ContextCompacted(trigger="manual", response_id="resp_10", input_tokens_after=42, replacement_input=items),
        conversation_id="c", span_id=None, channel="text",
    ).with_seq(11)
    state = state_from_resume(resume(last_assistant=answer, last_compacted=compacted))
    assert state.chain_id is None and state.replacement == items and state.input_tokens == 42
    # A turn that succeeded after the compaction wins again.
    newer = msg(12, "later", "assistant", response_id="resp_12")
    assert state_from_resume(resume(last_assistant=newer, last_compacted=compacted)).chain_id == "resp_12"


def test_a_voice_answer_since_the_last_text_answer_cleared_the_chain() -> None:
    voice = msg(12, "spoken answer", "assistant", channel="browser_voice", response_id="resp_rt")
    state = state_from_resume(resume(last_assistant=voice, last_response_id="resp_rt"))
    assert state.chain_id is None and state.conversation_id == "c"


def test_no_open_conversation_means_a_fresh_start_with_the_capsule() -> None:
    cap = capsule(3, through=2)
    state = state_from_resume(ResumeState(capsule=cap, last_response_id=None))
    assert state.conversation_id is None and state.chain_id is None and state.capsule == cap
