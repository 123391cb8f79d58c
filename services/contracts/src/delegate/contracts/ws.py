"""The ``/chat`` WebSocket protocol: JSON text frames in both directions."""

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .events import MAX_SEQ

MAX_CHAT_TEXT = 32_000  # characters in one user message
MAX_FRAME_BYTES = 64 * 1024  # a bigger client frame is refused with an error frame


class ClientFrame(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class SendMessage(ClientFrame):
    type: Literal["message"]
    text: str = Field(min_length=1, max_length=MAX_CHAT_TEXT)
    client_msg_id: str | None = Field(default=None, max_length=200)


class Compact(ClientFrame):
    type: Literal["compact"]


class EndConversation(ClientFrame):
    type: Literal["end_conversation"]


class Hello(ClientFrame):
    """Sent by a (re)connecting client: replay every committed event after ``after_seq``."""

    type: Literal["hello"]
    after_seq: int = Field(default=0, ge=0, le=MAX_SEQ)


class PingFrame(ClientFrame):
    type: Literal["ping"]


ClientMessage = Annotated[
    SendMessage | Compact | EndConversation | Hello | PingFrame, Field(discriminator="type")
]
CLIENT_MESSAGE: TypeAdapter[SendMessage | Compact | EndConversation | Hello | PingFrame] = TypeAdapter(
    ClientMessage
)

# Server -> client frame types (bodies are built by the gateway):
#   {"type":"event","event":EVENT}            committed ledger event, commit order, once each
#   {"type":"live","event":{...}}             live-only notice (capsule started/failed)
#   {"type":"delta","turn_id","attempt","index","text"}
#   {"type":"state", ...AgentState}
#   {"type":"error","code","message"}
#   {"type":"ready","last_seq":N}             replay after hello is done; live follows
#   {"type":"resync","reason":"..."}          the client fell behind: reconnect with hello
#   {"type":"pong"}
SERVER_FRAME_TYPES = ("event", "live", "delta", "state", "error", "ready", "resync", "pong", "ack")


def error_frame(code: str, message: str, **extra: Any) -> dict[str, Any]:
    return {"type": "error", "code": code, "message": message, **extra}
