"""Compact now and End conversation: at most one command at a time, and never a leaked lock.

An in-process ``Agent`` on a real nats-server. The faults are injected into the agent's own
state publish (its ``status`` part; the step that runs between taking the lock and starting the
compaction): one publish that fails (as when the bus is away) and one that hangs until it is
cancelled (as a step-down cancels it).
"""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from delegate.agent.agent import Agent
from delegate.agent.ledger import Ledger
from delegate.agent.settings import Settings
from delegate.agent.toolbox import Toolbox
from delegate.contracts.messages import AgentCommand
from delegate.runtime.bus import Bus, BusUnavailable, DomainError
from delegate.runtime.openai_client import LazyOpenAI

pytestmark = [pytest.mark.integration]


@pytest.fixture
async def agent(nats_url: str) -> AsyncIterator[Agent]:
    bus = await Bus.connect(nats_url, "agent-commands-test")
    await bus.ensure_streams(all_owners=True)  # appends land in the stream; no ledger reads them
    ledger = Ledger(bus)
    client = LazyOpenAI(
        timeout=10, max_retries=0, without_key="", endpoint={"api_key": "unused", "base_url": "http://127.0.0.1:9/v1"}
    )
    made = Agent(Settings(_env_file=None, nats_url=nats_url), bus, ledger, client, Toolbox(None, ledger))
    made.status.state.conversation_id = "conversation-to-compact"  # something to compact
    yield made
    await made.close()
    await client.close()
    await bus.close()


async def settled(agent: Agent) -> None:
    """Until no command runs (the compaction's task is over, whatever it did)."""
    command = agent.commands.task
    if command is not None:
        await asyncio.wait([command], timeout=30)
        assert command.done(), "the command never ended"


async def test_a_state_publish_that_fails_does_not_leave_the_agent_locked(agent: Agent) -> None:
    real = agent.status.publish
    failures: list[bool] = []

    async def away(**kwargs: Any) -> None:
        if not failures:
            failures.append(True)
            raise BusUnavailable("the bus is away")
        await real(**kwargs)

    agent.status.publish = away  # type: ignore[method-assign]
    try:
        await agent.on_compact(AgentCommand())
    except BusUnavailable:
        pass  # before the fix it surfaced here, with the lock already taken
    await settled(agent)
    assert failures, "the fault was never hit"
    assert not agent.status.lock.locked() and not agent.status.compacting
    # A turn can still take the lock.
    await asyncio.wait_for(agent.status.lock.acquire(), timeout=5)
    agent.status.lock.release()


async def test_a_cancelled_compact_does_not_leave_the_agent_locked(agent: Agent) -> None:
    entered = asyncio.Event()

    async def hang(**kwargs: Any) -> None:
        entered.set()
        await asyncio.Event().wait()  # until cancelled

    agent.status.publish = hang  # type: ignore[method-assign]
    call = asyncio.create_task(agent.on_compact(AgentCommand()))
    await asyncio.wait_for(entered.wait(), timeout=10)
    call.cancel()  # the request handler goes away (a step-down closes its connection) ...
    await asyncio.gather(call, return_exceptions=True)
    await agent.close()  # ... and the term ends: the running command is cancelled too
    assert not agent.status.lock.locked() and not agent.status.compacting


async def test_a_second_command_while_one_runs_is_busy(agent: Agent) -> None:
    entered, release = asyncio.Event(), asyncio.Event()
    real = agent.status.publish

    async def held(**kwargs: Any) -> None:
        entered.set()
        await release.wait()
        await real(**kwargs)

    agent.status.publish = held  # type: ignore[method-assign]
    assert (await agent.on_compact(AgentCommand())).ok
    await asyncio.wait_for(entered.wait(), timeout=10)  # the compaction runs (and holds the lock)
    with pytest.raises(DomainError) as second:
        await agent.on_compact(AgentCommand())
    assert second.value.code == "busy"
    # End conversation does not queue behind it (one task each, unbounded, before the fix): busy.
    with pytest.raises(DomainError) as end:
        await asyncio.wait_for(agent.on_end(AgentCommand()), timeout=10)
    assert end.value.code == "busy"
    release.set()
    await settled(agent)
    assert not agent.status.lock.locked() and not agent.status.compacting
    # Once it is over, End conversation runs.
    agent.status.publish = real  # type: ignore[method-assign]
    assert (await asyncio.wait_for(agent.on_end(AgentCommand()), timeout=30)).ok
    assert agent.status.state.conversation_id is None and not agent.status.lock.locked()
