"""Where a run stands, read from its journal: the durable-execution replay.

Each completed step is a ``task.step`` event (a model call with the calls it asked for, or
one tool call with its result), so a runner that was killed picks the task up again exactly
where the journal ends: calls the last model step asked for that have a result are not run
again, the model is not asked again for anything it already answered, and only the step
after the last completed one runs. A side-effecting call whose intent was journaled but whose
result was not may or may not have happened: it is never run again, it is marked unknown.
"""

import json
from dataclasses import dataclass, field
from typing import Any

from delegate.contracts.events import Event


@dataclass(frozen=True)
class FunctionCall:
    """A tool call the model asked for (a function call of the Responses API), not a voice call."""

    call_id: str
    name: str
    arguments: str  # as the model wrote them (JSON text, maybe invalid)

    def parsed(self) -> dict[str, Any] | None:
        """The arguments as an object; None when they are not a JSON object."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            return None
        return value if isinstance(value, dict) else None


@dataclass(frozen=True)
class Intent:
    step: int
    call: FunctionCall
    key: str


@dataclass
class Position:
    next_step: int = 1
    head: str | None = None  # the last journaled model response: the chain continues from it
    calls: list[FunctionCall] = field(default_factory=list)  # what that response asked for
    outputs: dict[str, str] = field(default_factory=dict)  # call_id -> what the model reads back
    intents: dict[str, Intent] = field(default_factory=dict)  # call_id -> a side effect begun
    nudge: str | None = None  # a user message for the next model call (after an unusable answer)
    failures: int = 0  # failed actions and failed evaluations in a row
    model_steps: int = 0

    @property
    def pending(self) -> list[FunctionCall]:
        """Calls of the last model step with no result yet (run, or marked unknown)."""
        return [c for c in self.calls if c.call_id not in self.outputs]

    def unanswered_intents(self) -> list[Intent]:
        return [self.intents[c.call_id] for c in self.pending if c.call_id in self.intents]


def replay(events: list[Event]) -> Position:
    """The position after ``events`` (one task's, in order)."""
    pos = Position()
    for event in events:
        data: dict[str, Any] = event.payload.get("data", {})
        step = data.get("step")
        if isinstance(step, int):
            pos.next_step = max(pos.next_step, step + 1)
        match event.kind, data.get("type"):
            case "task.step", "model":
                pos.model_steps += 1
                pos.head = data.get("response_id") or pos.head
                pos.calls = [
                    FunctionCall(c["call_id"], c["name"], c.get("arguments", "")) for c in data.get("calls", [])
                ]
                pos.outputs, pos.intents = {}, {}
                pos.nudge = data.get("nudge")
                if data.get("failed"):
                    pos.failures += 1
            case "task.step", "tool":
                pos.outputs[str(data.get("call_id"))] = str(data.get("output", ""))
                pos.failures = 0 if data.get("ok") else pos.failures + 1
            case "task.refused", _:
                pos.outputs[str(data.get("call_id"))] = f"Refused: {data.get('reason', '')}"
                pos.failures += 1
            case "task.step.intent", _:
                call = FunctionCall(
                    str(data.get("call_id")), str(data.get("name")), json.dumps(data.get("arguments", {}))
                )
                pos.intents[call.call_id] = Intent(int(step or 0), call, str(data.get("key", "")))
            case "task.step.unknown", _:
                pos.outputs[str(data.get("call_id"))] = unknown_output(str(data.get("name", "")))
            case "task.resumed", _:
                pos.failures = 0  # the owner looked and let it go on
    return pos


def unknown_output(name: str) -> str:
    return (
        f"UNKNOWN: the runner stopped while {name} was running, so it may or may not have happened. "
        "It was not repeated; the owner has to check. Do not call it again for the same purpose."
    )
