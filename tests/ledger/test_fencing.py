"""Fencing: the ledger refuses what a deposed leader publishes, by the token of its term.

The store's judgement on every backend, then the ledger's own code path on a real
nats-server: refusals are dead-lettered with their reason and counted, the mark survives a
restart, and who may fence is decided by the subject an event came on. "Refused" is always
shown by a positive marker: the dead letter itself, and a sentinel published after the
refused event and committed, so the refused one was judged by then.
"""

from collections.abc import AsyncIterator

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event, Fence, Singleton
from delegate.launcher.procs import NatsServer
from delegate.ledger.store import LedgerStore
from delegate.ledger.store.base import insert_params
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.waiting import eventually

from .builders import message
from .conftest import Running, StartLedger, dead_letters


def fenced(event: Event, token: int, singleton: Singleton = "agent") -> Event:
    return event.model_copy(update={"fence": Fence(singleton=singleton, token=token)})


# ---- the store: judged in the transaction, on every backend -------------------------------


async def test_an_older_token_is_refused_in_delivery_order_and_raises_nothing(store: LedgerStore) -> None:
    events = [message(f"m{i}", t=i) for i in range(5)]
    tokens = [5, 7, 5, 7, 6]
    rows = [insert_params(e) for e in events]
    fences = [Fence(singleton="agent", token=t) for t in tokens]
    written = await store.write(rows, fences=fences)
    assert [e.id for e in written.committed] == [events[i].id for i in (0, 1, 3)]
    assert [i for i, _ in written.refused] == [2, 4]
    assert written.refused[0][1].startswith("fenced: term token 5 is older than 7")
    assert written.refused[1][1].startswith("fenced: term token 6 is older than 7")
    assert await store.fence_marks() == {"agent": 7}

    # Another singleton has its own mark; an unfenced row is not judged at all.
    voice, plain = message("voice", t=10), message("plain", t=11)
    written = await store.write(
        [insert_params(voice), insert_params(plain)], fences=[Fence(singleton="voice", token=1), None]
    )
    assert [e.id for e in written.committed] == [voice.id, plain.id] and written.refused == []
    assert await store.fence_marks() == {"agent": 7, "voice": 1}

    # A redelivery of what the old term wrote while it led is a duplicate, not a refusal.
    again = await store.write([rows[0]], fences=[fences[0]])
    assert again.committed == [] and again.refused == []


async def test_a_redelivery_in_the_same_batch_as_its_first_copy_is_no_refusal(store: LedgerStore) -> None:
    """Under load the first copy, the new term and the old term's redelivery share one batch."""
    old, new, late = (message(text, t=i) for i, text in enumerate(["old", "new", "late"]))
    batch = [(old, 5), (new, 7), (late, 5), (old, 5)]
    written = await store.write(
        [insert_params(e) for e, _ in batch], fences=[Fence(singleton="agent", token=t) for _, t in batch]
    )
    assert [e.id for e in written.committed] == [old.id, new.id]
    assert [i for i, _ in written.refused] == [2]  # only the late one; the second `old` is a duplicate


async def test_the_mark_is_stored_and_read_again_after_reopening(store: LedgerStore) -> None:
    await store.write([insert_params(message("a", t=1))], fences=[Fence(singleton="agent", token=3)])
    refused = await store.write([insert_params(message("old", t=2))], fences=[Fence(singleton="agent", token=2)])
    assert refused.committed == [] and len(refused.refused) == 1
    assert await store.fence_marks() == {"agent": 3}
    await store.close()
    await store.open()
    assert await store.fence_marks() == {"agent": 3}


# ---- the ledger service -----------------------------------------------------------------


@pytest.fixture
async def agent_bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A connection with the agent's identity: only it may publish on ledger.evt.append.agent."""
    bus = await Bus.connect(role_url(nats_server, "agent"), "agent:fence-test")
    yield bus
    await bus.close()


async def _counts(ledger: Running) -> dict[str, int]:
    return (await ledger.bus.ping("ledger", timeout=2)).counts


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
async def test_a_deposed_leader_is_refused_and_the_mark_survives_a_restart(
    backend: str, start_ledger: StartLedger, agent_bus: Bus
) -> None:
    ledger = await start_ledger(backend)
    agent = topics.ledger_append("agent")
    old, new, late, sentinel = (message(text, t=i) for i, text in enumerate(["old", "new", "late", "sentinel"]))
    await agent_bus.publish(agent, fenced(old, 5))
    await agent_bus.publish(agent, fenced(new, 7))  # the standby took over: a new term
    await agent_bus.publish(agent, fenced(late, 5))  # the old leader wakes up
    await agent_bus.publish(agent, fenced(old, 5), msg_id="again")  # and what it wrote before comes again
    await agent_bus.publish(agent, fenced(sentinel, 7))
    await eventually(lambda: ledger.announced(sentinel.id), "the sentinel behind the late event")
    assert [e.id for e in ledger.committed] == [old.id, new.id, sentinel.id]
    [letter] = await dead_letters(ledger.bus, 1)
    assert letter.subject == agent.subject and late.id in letter.data
    assert letter.reason.startswith("fenced: term token 5 is older than 7"), letter.reason
    assert (await _counts(ledger))["fence.stale"] == 1
    assert (await ledger.bus.js.stream_info("DEAD")).state.messages == 1  # the redelivery was no refusal

    await ledger.halt()
    await ledger.start()
    later, marker = message("later", t=10), message("marker", t=11)
    await agent_bus.publish(agent, fenced(later, 6))  # newer than the first term, older than the mark
    await agent_bus.publish(agent, fenced(marker, 8))
    await eventually(lambda: ledger.announced(marker.id), "the marker after the restart")
    assert not ledger.announced(later.id)
    letters = await dead_letters(ledger.bus, 2)
    assert letters[1].reason.startswith("fenced: term token 6 is older than 7"), letters[1].reason
    assert (await _counts(ledger))["fence.stale"] == 1  # counted since this process started


async def test_who_may_fence_is_decided_by_the_subject(
    ledger: Running, agent_bus: Bus, nats_server: NatsServer
) -> None:
    agent, test = topics.ledger_append("agent"), topics.ledger_append("test")
    unfenced = message("unfenced on the agent's subject", t=1)
    borrowed = message("the agent's fence on another subject", t=2)
    wrong = message("voice's fence on the agent's subject", t=3)
    plain = message("a producer that is no singleton", t=4)
    ok = message("fenced, on its own subject", t=5)
    await agent_bus.publish(agent, unfenced)
    await ledger.bus.publish(test, fenced(borrowed, 9))
    await agent_bus.publish(agent, fenced(wrong, 9, "voice"))
    await ledger.bus.publish(test, plain)
    await agent_bus.publish(agent, fenced(ok, 1))
    voice_bus = await Bus.connect(role_url(nats_server, "voice"), "voice:fence-test")
    try:
        voice_plain, voice_ok = message("voice unfenced", t=6), message("voice fenced", t=7)
        await voice_bus.publish(topics.ledger_append("voice"), voice_plain)
        await voice_bus.publish(topics.ledger_append("voice"), fenced(voice_ok, 1, "voice"))
    finally:
        await voice_bus.close()
    await eventually(lambda: ledger.announced(voice_ok.id), "the last good event")
    assert [e.id for e in ledger.committed] == [plain.id, ok.id, voice_ok.id]
    letters = {d.data: d for d in await dead_letters(ledger.bus, 4)}

    def reason(event: Event) -> str:
        return next(d.reason for data, d in letters.items() if event.id in data)

    assert reason(unfenced).startswith("unfenced:") and reason(voice_plain).startswith("unfenced:")
    assert reason(borrowed).startswith("fence from another identity: 'test'"), reason(borrowed)
    assert reason(wrong).startswith("fence from another identity: 'agent'"), reason(wrong)
    counts = await _counts(ledger)
    assert (counts["fence.unfenced"], counts["fence.foreign"], counts["fence.stale"]) == (2, 2, 0)
    # Stored events carry no fence: the ledger judged it, readers have no use for it.
    assert all(e.fence is None for e in ledger.committed)
