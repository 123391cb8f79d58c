"""The ``/chat`` WebSocket protocol: JSON text frames in both directions.

``MessageBody`` is what a user message is, whichever route brings it: ``POST /api/messages``
validates its body with it and the ``message`` frame extends it, so both refuse the same
things with the same error types (``empty_text``, ``string_too_long`` on ``text``).
"""

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter

from .events import MAX_SEQ, Event
from .messages import AgentState, LiveNotice
from .text import refuse_blank
from .voice import VoiceState

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

    # built on first use (see events.Payload)
    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, defer_build=True)
    text: MessageText
    client_msg_id: ClientMsgId | None = None
    # Edit-and-resend: the id of the last user message, which this one supersedes (appended as a
    # new message; the old one stays in history). Only the last turn can be edited (not_last).
    supersedes: TurnId | None = None


class ClientFrame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use (see events.Payload)


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
CLIENT_MESSAGE: TypeAdapter[AnyClientFrame] = TypeAdapter(ClientMessage, config=ConfigDict(defer_build=True))

# ---- server -> browser ------------------------------------------------------------------------
# The gateway builds these bodies (the hot ones, ``event`` and ``delta``, as spliced JSON text);
# the models say what each one is, and a test validates what the gateway's builders produce.


class ServerFrame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # built on first use (see events.Payload)


class EventFrame(ServerFrame):
    """A committed ledger event, in commit order, once each."""

    type: Literal["event"]
    event: Event


class LiveFrame(ServerFrame):
    """A live-only notice (a capsule refresh started or failed): stored by nobody."""

    type: Literal["live"]
    event: LiveNotice


class DeltaFrame(ServerFrame):
    """A piece of an answer's text: ``index`` from 0 within ``attempt`` (a new attempt replaces)."""

    type: Literal["delta"]
    turn_id: str
    attempt: int
    index: int
    text: str


class StateFrame(AgentState):
    """The agent's state (without its ``error``) and the voice state, whenever either changes."""

    type: Literal["state"]
    voice: VoiceState | None = None


class ErrorFrame(ServerFrame):
    """A refused frame or a failed request. Turn error codes: busy, not_found, not_last (only
    the last turn can be regenerated or edited), nothing_to_stop; agent_unavailable /
    bus_unavailable when the bus is away."""

    type: Literal["error"]
    code: str
    message: str
    request: str | None = None  # the client frame's type this answers
    client_msg_id: str | None = None
    turn_id: str | None = None
    known: list[str] | None = None  # with unknown_type: the frame types there are


class AckFrame(ServerFrame):
    """A request was done: a ``message`` (stored; ``duplicate`` when it had been already), a
    ``stop`` / ``regenerate`` of ``turn_id``, a ``compact`` / ``end_conversation``."""

    type: Literal["ack"]
    request: str | None = None
    ok: bool | None = None
    client_msg_id: str | None = None
    event_id: str | None = None
    duplicate: bool | None = None
    turn_id: str | None = None


class ReadyFrame(ServerFrame):
    """The replay after ``hello`` is done; live events follow."""

    type: Literal["ready"]
    last_seq: int
    ledger_last_seq: int | None = None


class ResyncFrame(ServerFrame):
    """The client fell behind (``lagging``) or missed events (``gap``): reconnect with hello."""

    type: Literal["resync"]
    reason: str


class PongFrame(ServerFrame):
    type: Literal["pong"]


class VoiceFrame(ServerFrame):
    """Whenever a call starts, goes live or ends (the ``state`` frame carries it too)."""

    type: Literal["voice"]
    state: VoiceState


AnyServerFrame = (
    EventFrame | LiveFrame | DeltaFrame | StateFrame | ErrorFrame | AckFrame | ReadyFrame | ResyncFrame | PongFrame
    | VoiceFrame
)
SERVER_MESSAGE: TypeAdapter[AnyServerFrame] = TypeAdapter(
    Annotated[AnyServerFrame, Field(discriminator="type")], config=ConfigDict(defer_build=True)
)


def voice_frame(state: dict[str, Any]) -> dict[str, Any]:
    """``state``: a ``VoiceState`` as JSON."""
    return {"type": "voice", "state": state}


def error_frame(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, **extra}
