"""call_owner: phone the owner, and talk in the same relationship once they pick up.

The voice service places the call (Twilio REST) and runs the Realtime session, which starts
from the capsule and recent messages like any voice call, so whatever made the agent call is
already in what the voice model knows. The request id is the tool call's, so a call run again
(a retried request of the same response) places no second call.
"""

from typing import Any, Protocol

from delegate.contracts.voice import CallOwnerReply

from ..base import CURRENT_CALL, FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema
from .owner import outbox_id

BUSY = "busy"
# The voice service answers once Twilio accepted the call (a REST request or two).
CALL_TIMEOUT_S = 30.0


class Caller(Protocol):
    async def call_owner(self, request_id: str, reason: str) -> CallOwnerReply: ...


def call_tool(caller: Caller) -> Tool:
    async def handler(args: dict[str, Any]) -> str:
        call = CURRENT_CALL.get()
        request_id = outbox_id(call.call_id) if call is not None else outbox_id(str(args.get("reason", "")))
        try:
            reply = await caller.call_owner(request_id, str(args.get("reason") or ""))
        except Exception as exc:  # NotLeading, the voice service not answering
            raise ToolError(UNAVAILABLE, f"the call could not be placed: {exc}") from exc
        if reply.ok:
            return f"calling: the owner's phone is ringing (call {reply.call_sid}); the call joins this conversation."
        if reply.reason == BUSY:
            raise ToolError(FAILED, "a phone or browser voice call is already live; try again when it ends")
        raise ToolError(UNAVAILABLE if reply.reason == "unavailable" else FAILED, reply.message or "no call placed")

    return Tool(
        "call_owner",
        "Phone the owner now and talk by voice. Only for something that cannot wait for a message.",
        object_schema({"reason": {"type": "string", "maxLength": 500}}, ["reason"]),
        handler,
        ("local", "owner_contact", "phone", SIDE_EFFECT),
        timeout_s=CALL_TIMEOUT_S + 5.0,
    )
