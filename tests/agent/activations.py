"""Helpers of the activation tests: typed signals as the broker claims them, and waits on the ledger.

The tests publish an ``ActivationInput`` on the agent's input themselves (the real input path;
the inner plane is only its producer), so what the agent does with a batch is tested apart
from how the broker chose it.
"""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from delegate.contracts import streams
from delegate.contracts.events import Event
from delegate.contracts.messages import ActivationInput
from delegate.contracts.signals import AnySignal, ReminderDue, ReminderDuePayload
from tests.agent.rig import Probe, dump_on_failure
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]


def reminder(text: str, *, late_by_s: float = 0.0, **envelope: Any) -> ReminderDue:
    due = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
    return ReminderDue(
        source="reminders",
        payload=ReminderDuePayload(reminder_id="rem-1", text=text, due_at=due, late_by_s=late_by_s, grace_s=60),
        **envelope,
    )


def activation(*signals: AnySignal, **fields: Any) -> ActivationInput:
    return ActivationInput(
        signal_ids=[s.id for s in signals], signals=[s.model_dump(mode="json") for s in signals], **fields
    )


async def activation_events(probe: Probe, activation_id: str) -> list[Event]:
    """Everything in the activation's span, once its outcome is committed (by seq)."""

    async def outcome() -> Event | None:
        found = await probe.ledger_events(kinds=["activation.outcome"])
        return next((e for e in found if e.parent_id == activation_id), None)

    done = await eventually(outcome, f"the outcome of activation {activation_id}", timeout=40)
    return await probe.ledger_events(span_id=done.span_id)


async def settled(probe: Probe) -> None:
    """Every input published so far is acked: whatever the agent sends for them is out by then."""

    async def idle() -> bool:
        info = await probe.bus.js.consumer_info("AGENT", streams.AGENT_WORKER)
        return bool(info.num_ack_pending == 0 and info.num_pending == 0)

    await eventually(idle, "the agent to ack its inputs")


def text_items(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, text) of every message item in a request's input."""
    found: list[tuple[str, str]] = []
    for item in body.get("input") or []:
        if item.get("type", "message") != "message":
            continue
        content = item.get("content")
        parts = [content] if isinstance(content, str) else [str(p.get("text", "")) for p in content or []]
        found.extend((item.get("role", ""), part) for part in parts)
    return found


def dump_if_failed(request: Any, failed_before: int, system: System, standin: StandinProcess) -> None:
    """At a module fixture's teardown: keep the services' logs when a test of the module failed."""
    if request.session.testsfailed > failed_before:
        dump_on_failure(system, standin, ROOT / "test-output" / "logs" / request.module.__name__.rsplit(".", 1)[-1])
