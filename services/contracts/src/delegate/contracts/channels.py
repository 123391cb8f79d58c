"""SMS and email beyond the agent: what goes out (the outbox), what comes in late (MMS media),
and the pollers' health.

Outbound messages travel durably on stream CHANNELS, one subject per channel, each with a
producer-made id that is also its Nats-Msg-Id and the prefix of every ``delivery`` event the
sender records for it (``<id>:sending``, ``<id>:sent``, ``<id>:failed``, ``<id>:unknown``), so a
restarted sender finds what it already did by event id and never sends twice.
"""

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, TypeAdapter

from .ids import new_id, utcnow
from .messages import BusModel, Reply

SMS_BODY_LIMIT = 1600  # Twilio's maximum body length per message
MAX_OUTBOUND_TEXT = 64_000

Origin = Literal["reply", "tool", "activation", "voicemail"]


class OutboundSms(BusModel):
    """One text for the owner's phone; the sender splits it under Twilio's limit."""

    type: Literal["sms"] = "sms"
    id: str = Field(default_factory=new_id, min_length=1, max_length=48)
    ts: datetime = Field(default_factory=utcnow)
    text: str = Field(min_length=1, max_length=MAX_OUTBOUND_TEXT)
    origin: Origin = "reply"
    parent_id: str | None = None  # the event this delivers: the assistant answer, or the tool call
    conversation_id: str | None = None
    span_id: str | None = None


class OutboundEmail(BusModel):
    """One email for the owner, threaded onto ``in_reply_to`` when it answers one."""

    type: Literal["email"] = "email"
    id: str = Field(default_factory=new_id, min_length=1, max_length=48)
    ts: datetime = Field(default_factory=utcnow)
    subject: str = Field(min_length=1, max_length=900)
    text: str = Field(min_length=1, max_length=1_000_000)
    origin: Origin = "reply"
    in_reply_to: str | None = Field(default=None, max_length=998)  # the parent's Message-ID
    references: list[str] = Field(default_factory=list, max_length=100)
    parent_id: str | None = None
    conversation_id: str | None = None
    span_id: str | None = None


Outbound = Annotated[OutboundSms | OutboundEmail, Field(discriminator="type")]
OUTBOUND_ADAPTER: TypeAdapter[OutboundSms | OutboundEmail] = TypeAdapter(Outbound, config=ConfigDict(defer_build=True))


class MediaFetch(BusModel):
    """Download one MMS media item (authenticated, size-limited) and record it on its message."""

    id: str = Field(default_factory=new_id)
    ts: datetime = Field(default_factory=utcnow)
    parent_id: str  # the user message event the media came with
    message_sid: str = Field(max_length=64)
    index: int = Field(ge=0, le=99)
    url: str = Field(max_length=2048)
    content_type: str = Field(default="application/octet-stream", max_length=255)


class ChannelHealth(BusModel):
    """What one side of a channel is doing now, as /readyz detail and /api/state show it."""

    enabled: bool = False
    ok: bool = False
    # off | connecting | idle (IMAP IDLE) | polling | connected | reachable | failing
    state: str = "off"
    detail: str = ""
    last_ok_at: datetime | None = None
    last_error: str | None = None


class ChannelsState(Reply):
    """The pollers' real state: ``pollers.cmd.state``."""

    imap: ChannelHealth = Field(default_factory=ChannelHealth)
    smtp: ChannelHealth = Field(default_factory=ChannelHealth)
    sms: ChannelHealth = Field(default_factory=ChannelHealth)
    last_poll_at: datetime | None = None
    outbox_pending: int = 0


class ChannelsStateRequest(BusModel):
    pass
