"""Who a refused sender is, for the timeline only (the gateway's SMS and calls, the pollers'
mail): the memory service is asked which known person has the number or address
(``memory.cmd.people`` op ``match``). The answer names the person on the ``inbound.refused``
event and changes nothing else: the message is refused all the same (identity never widens
access).

Bounded and optional: a memory service that is down or slow costs the caller at most
``WHO_WAIT_S`` and the refusal is recorded without a name.
"""

import logging

from delegate.contracts import topics
from delegate.contracts.people import PeopleCommand

from .bus import Bus

log = logging.getLogger(__name__)
WHO_WAIT_S = 2.0


async def who(bus: Bus | None, phone: str | None = None, email: str | None = None) -> dict[str, str | None]:
    """``person_id``, ``person_name``, ``person_relation`` for ``InboundRefused``; empty: nobody known."""
    if bus is None or not (phone or email):
        return {}
    cmd = PeopleCommand(op="match", phones=[phone[:200]] if phone else None, emails=[email[:254]] if email else None)
    try:
        reply = await bus.request(topics.MEMORY_PEOPLE, cmd, timeout=WHO_WAIT_S)
    except Exception as exc:  # unavailable, timed out, refused: the refusal stands without a name
        log.info("who sent the refused message is not known now: %r", exc)
        return {}
    person = reply.person
    if person is None:
        return {}
    return {"person_id": person.id, "person_name": person.name[:200], "person_relation": person.relation}
