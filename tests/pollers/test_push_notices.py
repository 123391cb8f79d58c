"""Which events the owner is told about, in what words (issue #31): the pollers' push notices.
The cases are shared with the client's in-page notices (tests/client_js/notify.test.mjs), so a
push and the open tab say the same thing about the same event."""

import json
from pathlib import Path
from typing import Any

import pytest

from delegate.contracts.events import Event
from delegate.pollers.push_notices import notice_for

CASES: list[dict[str, Any]] = json.loads((Path(__file__).parents[1] / "support" / "notice_cases.json").read_text())


@pytest.mark.parametrize("case", CASES, ids=[c["why"] for c in CASES])
def test_the_notice_for_an_event(case: dict[str, Any]) -> None:
    event = Event(id="0193-000001", ts="2026-12-06T06:00:00Z", conversation_id="c", span_id=None, **case["event"])
    notice = notice_for(event)
    if case["notice"] is None:
        assert notice is None
        return
    assert notice is not None
    assert {"kind": notice.kind, "title": notice.title, "body": notice.body} == case["notice"]
    assert notice.tag == notice.event_id == event.id


def test_a_long_body_is_cut_to_fit_a_push() -> None:
    event = Event(id="e1", ts="2026-12-06T06:00:00Z", conversation_id=None, span_id=None, kind="task.finished",
                  channel="inner", payload={"task_id": "t", "data": {"answer": "word " * 1000}})
    notice = notice_for(event)
    assert notice is not None and len(notice.body) <= 600 and notice.body.endswith("…")
    assert len(notice.model_dump_json().encode()) < 3000  # well inside a push's 4 KB
