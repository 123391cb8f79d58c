"""The agent's appends carry its term's fence, and a successor's copy is never deduplicated away.

On a real nats-server, reading the LEDGER stream itself (no ledger process: what is judged
there is the ledger's part, tests/ledger/test_fencing.py).
"""

from collections.abc import Awaitable, Callable

import pytest

from delegate.agent.ledger import Ledger
from delegate.contracts.events import Event, Fence, Message, make_event
from delegate.runtime.bus import MSG_ID, Bus
from tests.agent.rig import Probe
from tests.support.nats import role_url
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]


async def stream_messages(bus: Bus) -> list[tuple[str | None, Event]]:
    info = await bus.js.stream_info("LEDGER")
    found = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await bus.js.get_msg("LEDGER", seq)
        assert msg.data is not None
        found.append(((msg.headers or {}).get(MSG_ID), Event.model_validate_json(msg.data)))
    return found


async def test_a_successors_copy_of_an_event_is_not_deduplicated_against_a_deposed_ones(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, "agent-fencing-test")
    try:
        await bus.ensure_streams(all_owners=True)
        ledger = Ledger(bus)
        # The user message keeps the input's id whoever writes it: the deposed leader's copy
        # (token 3, refused by the ledger) must not make JetStream drop the successor's (token 4).
        user = make_event(Message(text="hello"), conversation_id="c", span_id="s", channel="text", role="user")
        ledger.fence = Fence(singleton="agent", token=3)
        await ledger.append(user)
        await ledger.append(user)  # a retry within the same term is still deduplicated
        ledger.fence = Fence(singleton="agent", token=4)
        await ledger.append(user)
        stored = await stream_messages(bus)
        assert [(msg_id, e.id, e.fence) for msg_id, e in stored] == [
            (f"{user.id}:3", user.id, Fence(singleton="agent", token=3)),
            (f"{user.id}:4", user.id, Fence(singleton="agent", token=4)),
        ]
    finally:
        await bus.close()


async def test_a_term_after_the_lease_bucket_was_recreated_still_reaches_the_timeline(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    """Lease revisions start over in a new bucket; the ledger still remembers the old terms'
    tokens. The new term's token must exceed the ledger's mark, or every event is refused."""
    system = make_system().start("ledger")
    assert system.nats is not None
    # An earlier life of the system (before its NATS store was wiped) fenced up to token 1000.
    old = await Bus.connect(role_url(system.nats, "agent"), "agent:earlier-life")
    try:
        marker = make_event(Message(text="from an earlier life"), conversation_id=None, span_id=None,
                            channel="text", role="assistant")
        old_ledger = Ledger(old)
        old_ledger.fence = Fence(singleton="agent", token=1000)
        await old_ledger.append(marker)
    finally:
        await old.close()
    probe = await probe_for(system)
    await probe.wait_for(lambda: any(e.id == marker.id for e in probe.events), "the earlier life's event")

    system.start("agent")  # a fresh lease bucket: its first revision is far below 1000
    standin.script({"action": "text", "text": "Still here."})
    sent = await probe.send("Are you there?")
    answer = await probe.answer(sent.id)
    assert answer.payload["text"] == "Still here."
    assert [e.kind for e in probe.terms] == ["term.started"], "the new term's start was refused"
