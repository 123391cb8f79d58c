"""Which ledger events the owner is told about by Web Push, and in what words.

One notice per activation that did something, fired reminder, finished or failed task, and
failed delivery (issue #31). Everything else (the owner's own turns, bookkeeping) is not
worth waking a phone for.
"""

from delegate.contracts.events import Event
from delegate.contracts.push import MAX_NOTICE_TEXT, Notice

FAILED_DELIVERY = frozenset({"failed", "undelivered"})


def _cut(text: str, size: int = MAX_NOTICE_TEXT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= size else text[: size - 1] + "…"


def notice_for(event: Event) -> Notice | None:
    """The notice ``event`` calls for, or None."""
    payload = event.payload
    title: str
    body: str
    if event.kind == "inner.signal" and payload.get("signal_kind") == "reminder.due":
        signal = payload.get("signal") or {}
        text = str((signal.get("payload") or {}).get("text") or "")
        kind, title, body = "reminder", "Reminder", text or "A reminder is due."
    elif event.kind == "activation.outcome" and payload.get("status") == "completed":
        summary = str(payload.get("summary") or "")
        kind, title, body = "activation", "Delegate acted on its own", summary or "Open Delegate to see what it did."
    elif event.kind in ("task.finished", "task.failed"):
        data = payload.get("data") or {}
        if event.kind == "task.finished":
            kind, title, body = "task", "Task finished", str(data.get("answer") or "The task is done.")
        else:
            reason = str(data.get("reason") or data.get("error") or "it stopped")
            kind, title, body = "task", "Task failed", f"The task failed: {reason}"
    elif event.kind == "delivery" and payload.get("status") in FAILED_DELIVERY:
        channel = "SMS" if payload.get("channel") == "sms" else "email"
        error = str(payload.get("error") or payload.get("status"))
        kind, title, body = "delivery", f"An {channel} was not delivered", error
    else:
        return None
    return Notice(kind=kind, title=title, body=_cut(body), tag=event.id[:64], event_id=event.id, ts=event.ts)
