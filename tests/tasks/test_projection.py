"""The task book counts refusals from both places they happen: the toolset and the egress proxy."""

from datetime import timedelta

from delegate.contracts.events import TaskEvent, make_event
from delegate.contracts.ids import utcnow
from delegate.contracts.tasks import task_data
from delegate.tasks.projection import TaskBook


def test_refused_counts_tool_calls_refused_by_the_toolset_and_by_the_egress_proxy() -> None:
    book = TaskBook()
    at = utcnow()
    journal = [
        ("task.created", task_data(goal="read the internal page", source="owner")),
        ("task.started", task_data(attempt=1)),
        ("task.step", task_data(step=1, type="tool", call_id="c1", name="browser_open", ok=False,
                                output="refused", refusals=["10.0.0.5 is a private address"])),
        ("task.step", task_data(step=2, type="tool", call_id="c2", name="browser_open", ok=True, output="ok")),
        ("task.refused", task_data(step=3, call_id="c3", name="send_sms_to_owner", reason="not enabled")),
    ]
    for n, (kind, data) in enumerate(journal):
        book.apply(make_event(TaskEvent(task_id="t-1", data=data), kind=kind, conversation_id=None, span_id="t-1",
                              channel="text", ts=at + timedelta(seconds=n)))
    assert book.tasks["t-1"].summary().refused == 2
