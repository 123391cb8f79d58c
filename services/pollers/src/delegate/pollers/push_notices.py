"""Which ledger events the owner is told about by Web Push, and in what words.

One notice per activation that did something, fired reminder, finished or failed task, and
failed delivery (issue #31). Everything else (the owner's own turns, bookkeeping) is not
worth waking a phone for.
"""

from delegate.contracts.events import ActivationOutcome, Delivery, Event, InnerSignal, TaskEvent
from delegate.contracts.push import MAX_NOTICE_TEXT, Notice

FAILED_DELIVERY = frozenset({"failed", "undelivered"})


def _cut(text: str, size: int = MAX_NOTICE_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


def notice_for(event: Event) -> Notice | None:
    """The notice ``event`` calls for, or None."""
    title: str
    body: str
    if (signal := event.payload_as(InnerSignal)) is not None and signal.signal_kind == "reminder.due":
        text = str((signal.signal.get("payload") or {}).get("text") or "")
        kind, title, body = "reminder", "Reminder", text or "A reminder is due."
    elif (outcome := event.payload_as(ActivationOutcome)) is not None and outcome.status == "completed":
        body = outcome.summary or "Open Delegate to see what it did."
        kind, title = "activation", "Delegate acted on its own"
    elif event.kind in ("task.finished", "task.failed") and (task := event.payload_as(TaskEvent)) is not None:
        # Every task.* kind shares TaskEvent: its kind says which ending this is.
        data = task.data
        if event.kind == "task.finished":
            kind, title, body = "task", "Task finished", str(data.get("answer") or "The task is done.")
        else:
            reason = str(data.get("reason") or data.get("error") or "it stopped")
            kind, title, body = "task", "Task failed", f"The task failed: {reason}"
    elif (delivery := event.payload_as(Delivery)) is not None and delivery.status in FAILED_DELIVERY:
        channel = "SMS" if delivery.channel == "sms" else "email"
        error = delivery.error or delivery.status
        kind, title, body = "delivery", f"An {channel} was not delivered", error
    else:
        return None
    return Notice(kind=kind, title=title, body=_cut(body), tag=event.id[:64], event_id=event.id, ts=event.ts)
