"""nothing_to_do: how an activation says nothing, on purpose.

A tool rather than a reply marker: its reason arrives as a validated argument instead of being
parsed out of free text; nothing of it streams to a client as answer text (a marker would,
before it could be recognised); and the decision is recorded like any tool call, in order
inside the activation span. It is offered only in activations (a user's question always gets
an answer). Its result tells the model to end the turn without text; whatever text still
follows is not recorded as a message nor sent anywhere: the decision stands.
"""

from typing import Any

from delegate.contracts.events import Event, ToolCall
from delegate.contracts.messages import ToolCallReply

from .toolbox import OwnHandler

NOTHING_TO_DO = "nothing_to_do"
MAX_REASON = 2000  # ActivationOutcome.reason's limit

DEFINITION: dict[str, Any] = {
    "type": "function",
    "name": NOTHING_TO_DO,
    "description": (
        "Only when woken by inner activity: decide that nothing needs saying to the owner now. "
        "Nothing is sent; the reason is recorded in the timeline."
    ),
    "parameters": {
        "type": "object",
        "properties": {"reason": {"type": "string", "minLength": 1, "maxLength": MAX_REASON}},
        "required": ["reason"],
        "additionalProperties": False,
    },
    "strict": False,
}


class Silence:
    """One activation's nothing_to_do: offered to the model, and what it decided."""

    def __init__(self) -> None:
        self.reason: str | None = None

    @property
    def chosen(self) -> bool:
        return self.reason is not None

    def definitions(self) -> list[dict[str, Any]]:
        return [DEFINITION]

    def handlers(self) -> dict[str, OwnHandler]:
        return {NOTHING_TO_DO: self.take}

    async def take(self, arguments: dict[str, Any]) -> ToolCallReply:
        reason = arguments.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            return ToolCallReply(ok=False, output="give a short reason (a string)", error_code="invalid_arguments")
        self.reason = " ".join(reason.split())[:MAX_REASON]
        return ToolCallReply(ok=True, output="Recorded: nothing will be sent. End your turn now, without any text.")


def reason_of(call: Event) -> str:
    """The reason a recorded ``tool.call`` event of nothing_to_do gave (for redelivery)."""
    reason = call.typed(ToolCall).arguments.get("reason")
    return " ".join(str(reason or "no reason given").split())[:MAX_REASON]
