"""A user message, from any browser route, becomes one ``UserInput`` on the AGENT stream."""

import logging
from dataclasses import dataclass

from pydantic import ValidationError

from delegate.contracts import topics, ws
from delegate.contracts.events import Channel
from delegate.contracts.messages import GetRequest, UserInput
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)

AGENT_STREAM = "AGENT"
PUBLISH_DEADLINE_S = 10.0


class InputRejected(Exception):
    """The message is not acceptable; nothing was published."""

    def __init__(self, code: str, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


@dataclass(frozen=True)
class Submitted:
    event_id: str  # the id of the user's message event (the UserInput id)
    duplicate: bool  # this client_msg_id was sent before; event_id is the original one


def message_problem(exc: ValidationError) -> InputRejected | None:
    """The stable code for what is wrong with a message's text, the same on every route.

    None when the problem is not the text (a wrong type, an unknown field): each route words
    those itself (``bad_request`` over REST, ``bad_frame`` on the WebSocket).
    """
    for err in exc.errors():
        if "text" not in err.get("loc", ()):
            continue
        if err.get("type") == "string_too_long":
            return InputRejected(
                "text_too_long", f"the message text is over {ws.MAX_CHAT_TEXT} characters", 413
            )
        if err.get("type") in ("empty_text", "string_too_short"):
            return InputRejected("empty_text", "the message text is empty")
    return None


async def submit_message(bus: Bus, body: ws.MessageBody, *, channel: Channel = "text") -> Submitted:
    """Publish once per ``client_msg_id``: a repeat answers with the first message's id.

    ``body`` was validated by the route (REST and WebSocket share ``ws.MessageBody``).
    """
    client_msg_id = body.client_msg_id
    try:
        item = UserInput(channel=channel, text=body.text, client_msg_id=client_msg_id, supersedes=body.supersedes)
    except ValidationError as exc:
        raise InputRejected("bad_request", str(exc.errors()[0].get("msg", "invalid message"))) from exc
    msg_id = f"client:{client_msg_id}" if client_msg_id else item.id
    ack = await bus.publish(topics.AGENT_INPUT, item, msg_id=msg_id, deadline=PUBLISH_DEADLINE_S)
    if not ack.duplicate:
        return Submitted(item.id, False)
    return Submitted(await _original_id(bus, ack.seq, client_msg_id), True)


async def _original_id(bus: Bus, seq: int, client_msg_id: str | None) -> str:
    """The stream keeps the original within the duplicate window; the ledger is the fallback."""
    try:
        raw = await bus.js.get_msg(AGENT_STREAM, seq)
        assert raw.data is not None
        original = topics.AGENT_INPUT.decode(raw.data)
        return str(original.id)
    except Exception as exc:
        log.warning("could not read AGENT message %s for a duplicate: %r", seq, exc)
    if client_msg_id:
        try:
            reply = await bus.request(topics.LEDGER_GET, GetRequest(client_msg_id=client_msg_id))
            if reply.event is not None:
                return reply.event.id
        except (BusUnavailable, RemoteError) as exc:
            log.warning("ledger could not find client_msg_id %s: %s", client_msg_id, exc)
    raise BusUnavailable("the original of a repeated message could not be read")
