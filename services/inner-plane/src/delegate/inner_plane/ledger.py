"""Reading committed events from the ledger, a page at a time."""

from collections.abc import AsyncIterator

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import GetRequest, QueryRequest
from delegate.runtime.bus import Bus, RemoteError


async def read_range(bus: Bus, req: QueryRequest) -> AsyncIterator[list[Event]]:
    """Every event the query matches, in seq order, page by page."""
    after = req.after_seq
    while True:
        reply = await bus.request(topics.LEDGER_QUERY, req.model_copy(update={"after_seq": after}))
        if reply.events:
            yield reply.events
            after = reply.events[-1].seq or after
        if not reply.more or not reply.events:
            return


async def exists(bus: Bus, event_id: str) -> bool:
    """Whether the ledger has committed an event with this id."""
    try:
        reply = await bus.request(topics.LEDGER_GET, GetRequest(id=event_id))
    except RemoteError as exc:
        if exc.code == "not_found":
            return False
        raise
    return reply.event is not None
