"""The chat controls on the last turn, the same over REST and the WebSocket.

- Stop: ``agent.cmd.stop`` to the leader, which cuts the running model stream short.
- Regenerate: a ``RegenerateInput`` on the AGENT stream, queued behind running turns.
- Edit-and-resend: a user message with ``supersedes``, submitted like any message.

Only the conversation's last turn can be regenerated or edited; that is checked here against
the ledger (and again by the agent, in input order). Failures are ``TurnRejected`` with a
stable code and the HTTP status REST answers with.
"""

import asyncio
import logging
import time
import uuid

from delegate.contracts import topics, ws
from delegate.contracts.events import ConversationEnded, Event, Message
from delegate.contracts.messages import AgentCommand, GetRequest, QueryRequest, RegenerateInput, TurnCommand
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

from .inputs import PUBLISH_DEADLINE_S, InputRejected, Submitted, submit_message

log = logging.getLogger(__name__)

STATE_TIMEOUT_S = 1.0
# A message is acknowledged once JetStream has it, and the ledger commits it a moment later (its
# consumer may run behind the agent's, which streams the answer meanwhile): a control naming a
# message minted this recently waits for the ledger to have it before saying there is none.
COMMIT_WAIT_S = 3.0
COMMIT_POLL_S = 0.05
NOT_LAST = "Only the last message can be regenerated or edited."


class TurnRejected(InputRejected):
    """The control cannot apply to that turn (``not_found``, ``not_last``, ``busy``, ``nothing_to_stop``)."""


async def last_turn(bus: Bus, turn_id: str) -> Event:
    """The user message ``turn_id`` if it is its conversation's last turn and that turn is answered."""
    found = await _committed(bus, turn_id)
    if found is None or found.role != "user" or not found.is_kind(Message):
        raise TurnRejected("not_found", "There is no such message.", 404)
    try:
        later = await bus.request(
            topics.LEDGER_QUERY,
            QueryRequest(
                after_seq=found.seq or 0, conversation_id=found.conversation_id,
                kinds=["message", "turn.failed", "conversation.ended"], limit=500,
            ),
        )
    except RemoteError as exc:
        raise BusUnavailable(f"the ledger answered {exc.code}") from exc
    if later.more or any(e.role == "user" or e.is_kind(ConversationEnded) for e in later.events):
        raise TurnRejected("not_last", NOT_LAST, 409)
    if not any(e.parent_id == found.id for e in later.events):
        raise TurnRejected("busy", "That message is still being answered; stop it or wait.", 409)
    try:
        state = await bus.request(topics.AGENT_STATE_GET, AgentCommand(), timeout=STATE_TIMEOUT_S)
    except (BusUnavailable, RemoteError):
        state = None  # the agent is away: the input queues all the same
    if state is not None and (state.busy or state.compacting):
        raise TurnRejected("busy", "An answer or a compaction is running; try again when it is done.", 409)
    return found


async def _committed(bus: Bus, turn_id: str) -> Event | None:
    """The ledger's event ``turn_id``; for an id minted (UUIDv7) in the last ``COMMIT_WAIT_S``,
    once the ledger has it or that time is up. An id dated in the future waits no longer."""
    now = time.time()
    deadline = min(_minted_at(turn_id) or 0.0, now) + COMMIT_WAIT_S
    while True:
        try:
            found = (await bus.request(topics.LEDGER_GET, GetRequest(id=turn_id))).event
        except RemoteError as exc:
            if exc.code != "not_found":
                raise BusUnavailable(f"the ledger answered {exc.code}") from exc
            found = None
        if found is not None or time.time() >= deadline:
            return found
        await asyncio.sleep(COMMIT_POLL_S)


def _minted_at(turn_id: str) -> float | None:
    """When a UUIDv7 id was made (Unix seconds), else None."""
    try:
        parsed = uuid.UUID(turn_id)
    except ValueError:
        return None
    return (parsed.int >> 80) / 1000 if parsed.version == 7 else None


async def stop_turn(bus: Bus, turn_id: str) -> None:
    try:
        await bus.request(topics.AGENT_STOP, TurnCommand(turn_id=turn_id))
    except RemoteError as exc:
        if exc.code == "nothing_to_stop":
            raise TurnRejected(exc.code, exc.message, 409) from exc
        raise TurnRejected(exc.code, exc.message, 502) from exc


async def regenerate_turn(bus: Bus, turn_id: str) -> str:
    """Queue a new attempt at the last turn; returns the input's id (the new answer's event id)."""
    await last_turn(bus, turn_id)
    item = RegenerateInput(turn_id=turn_id)
    await bus.publish(topics.AGENT_INPUT, item, msg_id=item.id, deadline=PUBLISH_DEADLINE_S)
    return item.id


async def submit_edit_or_message(bus: Bus, body: ws.MessageBody) -> Submitted:
    """A user message; with ``supersedes``, only once that is the last turn (a repeat is a duplicate)."""
    if body.supersedes is not None:
        if body.client_msg_id:
            try:
                sent = (await bus.request(topics.LEDGER_GET, GetRequest(client_msg_id=body.client_msg_id))).event
            except RemoteError:
                sent = None
            if sent is not None:
                return Submitted(sent.id, True)  # this edit was sent and stored already
        await last_turn(bus, body.supersedes)
    return await submit_message(bus, body)
