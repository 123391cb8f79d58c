"""The owner-busy tracker (``inner_plane.turns``): a call and an unanswered message keep the
broker from interleaving an activation; their end releases it."""

from datetime import timedelta

from delegate.contracts.events import Message, SessionEnded, SessionStarted, TurnFailed, make_event
from delegate.contracts.ids import utcnow
from delegate.inner_plane.state import BrokerState
from delegate.inner_plane.turns import busy, observe

STALE = timedelta(seconds=60)


def test_a_call_is_busy_from_its_start_to_its_end() -> None:
    state = BrokerState()
    started = make_event(SessionStarted(type="phone", session_id="v1"), conversation_id="c", span_id="s",
                         channel="phone")
    assert observe(state, started)
    found = busy(state, utcnow(), STALE)
    assert found is not None and "v1" in found[0]
    other = make_event(SessionEnded(type="phone", session_id="v2", reason="hangup"), conversation_id="c",
                       span_id="s", channel="phone")
    assert not observe(state, other)  # another call's end releases nothing
    ended = make_event(SessionEnded(type="phone", session_id="v1", reason="hangup"), conversation_id="c",
                       span_id="s", channel="phone")
    assert observe(state, ended)
    assert busy(state, utcnow(), STALE) is None


def test_a_message_is_busy_until_its_answer_or_failure() -> None:
    state = BrokerState()
    asked = make_event(Message(text="hi"), conversation_id="c", span_id="s", channel="sms", role="user")
    assert observe(state, asked)
    assert busy(state, utcnow(), STALE) is not None
    failed = make_event(TurnFailed(code="model_error", message="m"), conversation_id="c", span_id="s",
                        channel="sms", parent_id=asked.id)
    assert observe(state, failed)
    assert busy(state, utcnow(), STALE) is None


def test_a_call_open_in_a_state_file_from_before_the_rename_still_keeps_the_owner_busy() -> None:
    # State files written while the field was "open_sessions" are read as they are: a call open
    # across the upgrade must not let the broker interleave an activation.
    state = BrokerState.model_validate_json('{"open_sessions": {"v1": "2026-01-01T00:00:00Z"}}')
    found = busy(state, utcnow(), STALE)
    assert found is not None and "v1" in found[0]
