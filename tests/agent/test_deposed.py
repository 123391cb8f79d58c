"""A leader that was deposed without noticing yet neither takes an input on nor acknowledges one.

An in-process ``Agent`` with a real lease, a real ledger process and the real OpenAI stand-in.
The lease is taken from under it by a foreign write to the key (as a successor's ``create``
after an expiry would), before the input and in the middle of the turn. Either way its handler
raises ``Deposed``, which the consumer answers with a nak: the input goes to the next leader
instead of being acknowledged by one whose events the ledger refuses.
"""

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from delegate.agent.agent import Agent, Deposed
from delegate.agent.ledger import Ledger
from delegate.agent.settings import Settings
from delegate.agent.toolbox import Toolbox
from delegate.contracts import topics
from delegate.contracts.messages import Delta, UserInput
from delegate.runtime.bus import Bus
from delegate.runtime.lease import LEASE_KEY, Lease
from delegate.runtime.openai_client import LazyOpenAI
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration]

BUCKET = "agent_lease_deposed_test"  # its own bucket: the lease code takes any


class Rig:
    def __init__(self, bus: Bus, agent: Agent, lease: Lease) -> None:
        self.bus, self.agent, self.lease = bus, agent, lease
        self._n = 0

    async def deliver(self, text: str) -> tuple[UserInput, Any]:
        """Publish an input and take its delivery, as the agent's consumer would."""
        self._n += 1
        msg = UserInput(text=text)
        await self.bus.publish(topics.AGENT_INPUT, msg, msg_id=msg.id)
        psub = await self.bus.js.pull_subscribe(
            topics.AGENT_INPUT.subject, durable=f"deposed-{self._n}", stream="AGENT"
        )
        [raw] = await psub.fetch(1, timeout=10)
        return msg, raw

    async def depose(self) -> None:
        kv = await self.bus.js.key_value(BUCKET)
        await kv.put(LEASE_KEY, b"the-successor")


@pytest.fixture
async def rig(make_system: Callable[..., System], standin: StandinProcess) -> AsyncIterator[Rig]:
    system = make_system().start("ledger")
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "agent-deposed-test")
    await bus.ensure_streams(all_owners=True)
    lease = Lease(bus.js, "in-process", bucket=BUCKET, singleton="agent", ttl=30.0, renew_every=10.0)
    assert await lease.try_acquire()
    ledger = Ledger(bus)
    ledger.fence = lease.fence
    client = LazyOpenAI(
        timeout=60, max_retries=0, without_key="", endpoint={"api_key": TEST_API_KEY, "base_url": standin.base_url}
    )
    client.preload()  # as the agent does once it leads
    settings = Settings(_env_file=None, nats_url=system.nats.url)
    agent = Agent(settings, bus, ledger, client, Toolbox(None, ledger), lease)
    await agent.restore()
    yield Rig(bus, agent, lease)
    await agent.close()
    await client.close()
    await bus.close()


async def test_a_deposed_leader_does_not_take_an_input_on(rig: Rig) -> None:
    await rig.depose()
    msg, raw = await rig.deliver("hello?")
    with pytest.raises(Deposed):
        await rig.agent.on_input(msg, raw)
    # Nothing of the turn was published: not even the user message. And the term steps down
    # at once rather than fetch the input again (each nak costs one of its deliveries).
    assert await rig.agent.ledger.get(msg.id) is None
    assert rig.agent.guard.lost.is_set() and not rig.lease.held


async def test_a_leader_deposed_mid_turn_does_not_acknowledge_the_input(rig: Rig, standin: StandinProcess) -> None:
    # About 8 s of deltas: the lease goes at the first one, long before the turn can end.
    standin.script({"action": "slow", "delay_ms": 100, "text": " ".join(f"word{i}" for i in range(80))})
    streaming = asyncio.Event()

    async def on_delta(delta: Delta) -> None:
        if delta.turn_id == msg.id:
            streaming.set()

    await rig.bus.subscribe(topics.AGENT_DELTA, on_delta)
    msg, raw = await rig.deliver("tell me slowly")
    handling = asyncio.create_task(rig.agent.on_input(msg, raw))
    # A delta goes out only once the turn was taken on (its lease read answered): mid-turn from
    # here. Polling the ledger for the user message instead could, at load 20, see it late,
    # after the turn had ended and been acknowledged.
    await asyncio.wait_for(streaming.wait(), timeout=60)
    await rig.depose()
    with pytest.raises(Deposed):
        await asyncio.wait_for(handling, timeout=60)
    assert rig.agent.guard.lost.is_set()


async def test_a_deposed_leader_shows_no_delta_of_the_input(rig: Rig) -> None:
    # The read taking a user message on runs alongside the model request (issue #27): the
    # request may start, but no delta goes out and nothing is recorded before the read answers.
    deltas: list[str] = []

    async def on_delta(delta: Delta) -> None:
        deltas.append(delta.turn_id)

    await rig.bus.subscribe(topics.AGENT_DELTA, on_delta)
    await rig.depose()
    msg, raw = await rig.deliver("hello? say something")
    with pytest.raises(Deposed):
        await asyncio.wait_for(rig.agent.on_input(msg, raw), timeout=60)
    await rig.bus.nc.flush()  # anything the agent emitted before the raise has reached us now
    assert msg.id not in deltas
    assert await rig.agent.ledger.get(msg.id) is None
    assert rig.agent.guard.lost.is_set()
