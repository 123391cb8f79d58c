"""The contracts package: subjects vs streams, event validation, cursors, client frames."""

import re
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from delegate.contracts import subjects
from delegate.contracts.cursor import Cursor, CursorError
from delegate.contracts.events import PAYLOADS, Event, Message, Role, SpanOpened, make_event
from delegate.contracts.streams import STREAMS
from delegate.contracts.ws import CLIENT_MESSAGE

ROOT = Path(__file__).resolve().parents[2]


def _subject_values() -> list[str]:
    return [v for k, v in vars(subjects).items() if k.isupper() and isinstance(v, str) and "." in v]


def _captured(subject: str) -> list[str]:
    def matches(pattern: str) -> bool:
        if pattern.endswith(".>"):
            return subject.startswith(pattern[:-1])
        return pattern == subject

    return [spec.name for spec in STREAMS if any(matches(p) for p in spec.subjects)]


def test_every_durable_subject_is_in_exactly_one_stream() -> None:
    for subject in _subject_values():
        kind = subject.split(".")[1]
        captured = _captured(subject)
        if kind == "evt":
            assert len(captured) == 1, (subject, captured)
        else:
            assert captured == [], f"{subject} ({kind}) must not be stored in {captured}"
    assert len(_captured(subjects.dead_letter("ledger-writer"))) == 1


def test_no_subject_literal_outside_the_subjects_module() -> None:
    literal = re.compile(r"""["'](ledger|agent|inner|tools|voice|pollers|channels|dead)\.(evt|cmd|live)\.""")
    offenders = []
    for path in (ROOT / "services").rglob("*.py"):
        if path.name == "subjects.py" or ".venv" in path.parts:
            continue
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if literal.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{lineno}")
    assert offenders == []


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
def test_every_kind_has_a_payload_model_that_round_trips(kind: str) -> None:
    model = PAYLOADS[kind]
    required = {name for name, f in model.model_fields.items() if f.is_required()}
    samples = {"text": "t", "type": "interaction", "after_seq": 0, "through_seq": 1, "code": "x", "message": "m",
               "call_id": "c", "name": "n", "ok": True, "output": "o", "input_tokens": 3, "trigger": "auto",
               "source": "timer", "status": "completed", "term_id": "s", "holder": "agent", "reason": "lost",
               "sender": "+15550001111", "outbox_id": "o", "channel": "sms", "mailbox": "INBOX", "uidvalidity": 7,
               "uid": 3, "outcome": "input", "content_type": "image/png", "stored": False,
               "session_id": "v", "decision": "drop", "reminder_id": "r", "revision": 1,
               "spec": {"text": "t", "at": "2026-12-01T09:00:00Z"}, "fact_id": "f",
               "valid_at": "2026-12-01T09:00:00Z", "event_ids": ["e"], "import_id": "i", "format": "ndjson",
               "lines": 2, "conversations": 1, "events": 4, "run_id": "r", "run_type": "task",
               "d2_path": "thoughtflow/r/flow.d2", "call_sid": "CA", "to": "+15550001111", "voicemail": "v",
               "ring_timeout_s": 60, "answered_by": "machine_end_beep", "action": "spoken",
               "scope": "day", "period": "2026-12-06", "detail": "d", "spent_day_usd": 1.5, "spent_month_usd": 9.0,
               "until": "2026-12-07T00:00:00Z", "model": "gpt-5.5", "purpose": "activation",
               "push_id": "p", "subscription_id": "s",
               "person_id": "p", "commitment_id": "c", "by": "owner", "what": "w", "due": "2026-12-11T09:00:00Z",
               "calendars": 1, "change": "moved", "op": "create", "contact_uid": "c"}
    overrides = {"term.started": {"type": "agent"}, "inbound.refused": {"reason": "not_owner"},
                 "delivery": {"status": "sent"}, "session.started": {"type": "phone"},
                 "session.ended": {"type": "voice", "reason": "hangup"}, "import.finished": {"status": "done"},
                 "budget.notice": {"reason": "budget_usd"}, "push.delivery": {"status": "sent"},
                 "calendar.changed": {"uid": "u"}, "calendar.written": {"uid": "u"}}
    payload = model.model_validate({k: overrides.get(kind, {}).get(k, samples[k]) for k in required})
    role: Role | None = "user" if kind == "message" else None
    event = make_event(payload, conversation_id="c", span_id="s", channel="text", role=role)
    again = Event.model_validate_json(event.model_dump_json())
    assert again == event
    assert again.typed(model) == payload


def test_unknown_kinds_and_bad_payloads_are_rejected() -> None:
    with pytest.raises(ValidationError, match="unknown event kind"):
        Event(kind="message.deleted", payload={})
    with pytest.raises(ValidationError):
        Event(kind="message", role="user", payload={"txt": "typo"})
    with pytest.raises(ValidationError, match="needs a role"):
        Event(kind="message", payload={"text": "hi"})
    with pytest.raises(ValidationError):
        Event(kind="span.opened", payload={"type": "party"})
    with pytest.raises(ValidationError):
        Event(kind="term.started", payload={"term_id": "s", "type": "interaction", "holder": "a"})
    with pytest.raises(ValidationError):
        Event(kind="term.ended", payload={"term_id": "s", "reason": "tired"})
    assert Event(kind="task.created", payload={"task_id": "t1"}).kind == "task.created"
    with pytest.raises(ValidationError):
        Event(kind="message", role="user", ts=datetime(2026, 1, 1), payload={"text": "naive ts"})


def test_event_timestamps_serialize_fixed_width_so_text_order_is_time_order() -> None:
    a = make_event(SpanOpened(type="interaction"), conversation_id="c", span_id="s", channel="text",
                   ts=datetime(2026, 1, 1, 0, 0, 0, tzinfo=UTC))
    b = make_event(Message(text="x"), conversation_id="c", span_id="s", channel="sms", role="user",
                   ts=datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC))
    ta, tb = a.model_dump(mode="json")["ts"], b.model_dump(mode="json")["ts"]
    assert ta == "2026-01-01T00:00:00.000000Z" and tb == "2026-01-01T00:00:00.000005Z" and ta < tb


@given(st.datetimes(timezones=st.just(UTC)), st.text(min_size=1, max_size=64).filter(lambda s: "|" not in s))
def test_cursor_round_trips(ts: datetime, event_id: str) -> None:
    cursor = Cursor(ts, event_id)
    assert Cursor.decode(cursor.encode()) == cursor


@given(st.text(max_size=300))
def test_garbage_cursors_raise_cursor_error_only(text: str) -> None:
    try:
        Cursor.decode(text)
    except CursorError:
        pass


def test_client_frames_are_strict() -> None:
    assert CLIENT_MESSAGE.validate_json('{"type":"message","text":"hi"}').type == "message"
    for bad in ('{"type":"message","text":""}', '{"type":"message","text":5}', '{"type":"nope"}',
                '{"type":"compact","extra":1}', "[1,2]", '{"type":"message","text":"' + "x" * 40_000 + '"}'):
        with pytest.raises(ValidationError):
            CLIENT_MESSAGE.validate_json(bad)
