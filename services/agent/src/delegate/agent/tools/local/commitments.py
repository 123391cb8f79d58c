"""commitments_list, commitment_update: the promises the owner and the assistant made (issue #30).

Commitments are read from the turns by the memory service (the same model call that reads the
facts); these tools let the model see the open ones and mark one kept or dropped when the owner
says so ("done", "forget about the photos"). The tool call's id is the request id, so a call
run again closes nothing twice; the change cites the turn the call answers.
"""

from typing import Any, Protocol

from delegate.contracts.ids import format_ts
from delegate.contracts.people import Commitment, CommitmentsCommand, CommitmentsReply
from delegate.runtime.bus import BusUnavailable, RemoteError

from ..base import CURRENT_CALL, FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError, object_schema

TAGS = ("local", "memory")
WRITES = (*TAGS, SIDE_EFFECT)


class CommitmentsDesk(Protocol):
    async def commitments(self, cmd: CommitmentsCommand) -> CommitmentsReply: ...


def line(c: Commitment) -> str:
    due = f", due {format_ts(c.due)}" if c.due else ""
    to = f" to {c.to}" if c.to else ""
    return f"{c.id} [{c.state}] {c.by}{to}: {c.what}{due}"


def commitment_tools(desk: CommitmentsDesk | None) -> list[Tool]:
    async def ask(cmd: CommitmentsCommand) -> CommitmentsReply:
        if desk is None:
            raise ToolError(UNAVAILABLE, "memory is not connected in this process")
        try:
            return await desk.commitments(cmd)
        except BusUnavailable as exc:
            raise ToolError(UNAVAILABLE, f"the memory service cannot be reached right now ({exc})") from exc
        except RemoteError as exc:
            raise ToolError(FAILED, exc.message or exc.code) from exc

    async def list_open(args: dict[str, Any]) -> str:
        reply = await ask(CommitmentsCommand(op="list", state=args.get("state", "open"), limit=50))
        return "\n".join(line(c) for c in reply.commitments) or "No commitments in that state."

    async def update(args: dict[str, Any]) -> str:
        call = CURRENT_CALL.get()
        cites = [e for e in ((call.parent_id if call else None),) if e]
        cmd = CommitmentsCommand(
            op="update", commitment_id=args.get("id"), what=args.get("what"), new_state=args["state"],
            reason=args.get("reason", ""), event_ids=cites, request_id=call.call_id if call else None,
            conversation_id=call.conversation_id if call else None, span_id=call.span_id if call else None,
        )
        reply = await ask(cmd)
        if reply.commitment is None:
            return "Updated."
        return f"Marked {args['state']}: {line(reply.commitment)}"

    return [
        Tool("commitments_list",
             "The promises the owner and you made (open ones by default, soonest due first), with their ids.",
             object_schema({"state": {"type": "string", "enum": ["open", "kept", "dropped", "all"],
                                      "default": "open"}}, []),
             list_open, TAGS),
        Tool("commitment_update",
             "Mark a commitment kept (done) or dropped (no longer meant) when the owner says so, or when you "
             "did what you promised. Name it by id, or by what was promised (the one open commitment it "
             "fits best).",
             object_schema({"id": {"type": "string", "minLength": 1, "maxLength": 64},
                            "what": {"type": "string", "minLength": 1, "maxLength": 2000},
                            "state": {"type": "string", "enum": ["kept", "dropped"]},
                            "reason": {"type": "string", "maxLength": 500}}, ["state"]),
             update, WRITES),
    ]
