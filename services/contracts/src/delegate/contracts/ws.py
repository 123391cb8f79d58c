"""The ``/chat`` WebSocket protocol: JSON text frames in both directions.

``MessageBody`` is what a user message is, whichever route brings it: ``POST /api/messages``
validates its body with it and the ``message`` frame extends it, so both refuse the same
things with the same error types (``empty_text``, ``string_too_long`` on ``text``).
"""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from .events import MAX_SEQ
from .text import refuse_blank

MAX_CHAT_TEXT = 32_000  # characters in one user message
MAX_FRAME_BYTES = 64 * 1024  # a bigger client frame is refused with an error frame
MAX_CLIENT_MSG_ID = 200

MessageText = Annotated[str, Field(max_length=MAX_CHAT_TEXT), AfterValidator(refuse_blank("message text"))]
# An empty id could never be deduplicated (it reads as "no id"): refused, as everywhere.
ClientMsgId = Annotated[str, Field(min_length=1, max_length=MAX_CLIENT_MSG_ID)]
# A turn is named by its user message's event id (the deltas' ``turn_id``).
TurnId = Annotated[str, Field(min_length=1, max_length=64)]


class MessageBody(BaseModel):
    """A user message as a browser sends it (the REST body; unknown fields are ignored there)."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True)
    text: MessageText
    client_msg_id: ClientMsgId | None = None
    # Edit-and-resend: the id of the last user message, which this one supersedes (appended as a
    # new message; the old one stays in history). Only the last turn can be edited (not_last).
    supersedes: TurnId | None = None


class ClientFrame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SendMessage(MessageBody, ClientFrame):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    type: Literal["message"]


class Compact(ClientFrame):
    type: Literal["compact"]


class EndConversation(ClientFrame):
    type: Literal["end_conversation"]


class Stop(ClientFrame):
    """Stop generating the answer to ``turn_id``: the partial answer is kept, marked stopped."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    type: Literal["stop"]
    turn_id: TurnId


class Regenerate(ClientFrame):
    """Answer the last turn again: a new attempt, recorded with ``attempt`` and ``regenerates``."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    type: Literal["regenerate"]
    turn_id: TurnId


class Hello(ClientFrame):
    """Sent by a (re)connecting client: replay every committed event after ``after_seq``."""

    type: Literal["hello"]
    after_seq: int = Field(default=0, ge=0, le=MAX_SEQ)


class PingFrame(ClientFrame):
    type: Literal["ping"]


AnyClientFrame = SendMessage | Compact | EndConversation | Stop | Regenerate | Hello | PingFrame
ClientMessage = Annotated[AnyClientFrame, Field(discriminator="type")]
CLIENT_MESSAGE: TypeAdapter[AnyClientFrame] = TypeAdapter(ClientMessage)

# Server -> client frame types (bodies are built by the gateway):
#   {"type":"event","event":EVENT}            committed ledger event, commit order, once each
#   {"type":"live","event":{...}}             live-only notice (capsule started/failed)
#   {"type":"delta","turn_id","attempt","index","text"}
#   {"type":"state", ...AgentState}
#   {"type":"error","code","message"}             (+ "request", and "turn_id" for stop/regenerate)
#   {"type":"ack","request":"message",...}        also "compact" / "end_conversation" with ok
#   {"type":"ack","request":"stop"|"regenerate","turn_id","ok":true}
#   turn error codes: busy, not_found, not_last (only the last turn can be regenerated or
#   edited), nothing_to_stop; agent_unavailable / bus_unavailable when the bus is away
#   {"type":"ready","last_seq":N}             replay after hello is done; live follows
#   {"type":"resync","reason":"..."}          the client fell behind: reconnect with hello
#   {"type":"pong"}
#   {"type":"voice","state":VoiceState}       whenever a call starts, goes live or ends
#                                             (the ``state`` frame carries it too, as "voice")
SERVER_FRAME_TYPES = ("event", "live", "delta", "state", "error", "ready", "resync", "pong", "ack", "voice")


def voice_frame(state: dict[str, Any]) -> dict[str, Any]:
    """``state``: a ``VoiceState`` as JSON."""
    return {"type": "voice", "state": state}


def error_frame(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, **extra}
