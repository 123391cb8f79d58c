"""``python -m delegate.agent``: wait for the lease, lead until it is lost or we are stopped.

Leadership is a NATS connection of its own. Everything only the leader may do (consume input,
answer ``agent.cmd.*`` and ``tools.cmd.*``, watch committed events) is subscribed on it, so
stepping down is closing that one connection: no stray subscription can outlive the lease. A
standby answers nothing (not even ping), so ``/readyz`` and every command always reach the
leader; during a takeover they find nobody for a few seconds and say so.
"""

import asyncio
import contextlib
import logging
import socket

from delegate.contracts import streams, subjects, topics
from delegate.runtime.bus import Bus
from delegate.runtime.lease import Lease
from delegate.runtime.ledger_client import restore_for_takeover
from delegate.runtime.openai_client import LazyOpenAI
from delegate.runtime.retry import sleep_unless
from delegate.runtime.service import run_service
from delegate.runtime.settings_check import load_settings

from .agent import Agent
from .ledger import Ledger
from .outbound import Outbox
from .settings import Settings
from .term import LeadershipTerm
from .toolbox import Toolbox

log = logging.getLogger(__name__)

SERVICE = "agent"
# Shares of STOP_GRACE_S (the process exits when it is over): a turn running at SIGTERM may
# finish within the first, then it is handed back (redelivered to the next leader); recording
# term.ended may hold up a shutdown or a step-down no longer than the second. The rest is for
# closing the lease and the connections.
DRAIN_SHARE = 0.4
TERM_END_SHARE = 0.35


def run() -> None:
    run_service(SERVICE, load_settings(SERVICE, Settings), serve)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    instance = settings.instance_name or socket.gethostname()
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}", settings=settings)
    await bus.ensure_streams()
    ledger = Ledger(bus)
    # The SDK loads once this agent leads (``lead``), not with its code: see openai_client.
    client = LazyOpenAI(
        timeout=settings.openai_timeout, max_retries=settings.openai_max_retries,
        without_key="every turn fails until it is set", endpoint=settings.openai_client_options(),
    )
    lease = Lease(
        bus.js, instance, bucket=subjects.AGENT_LEASE_BUCKET, singleton="agent",
        ttl=settings.agent_lease_ttl, renew_every=settings.agent_lease_renew, replicas=settings.nats_replicas,
    )
    # The tools send only while a fresh read shows the lease ours: CHANNELS is not fenced.
    toolbox = await Toolbox.start(settings, bus, ledger, Outbox(bus, ledger, lease.confirm))
    log.info(
        "agent %s standing by for the lease (model %s, compaction at %d input tokens, capsule refresh at %.0f%%)",
        instance, settings.openai_model, settings.compact_threshold, 100 * settings.capsule_threshold,
    )
    try:
        while not stop.is_set():
            if await lease.try_acquire():
                await lead(settings, instance, bus, ledger, client, toolbox, lease, stop)
                continue
            await sleep_unless(stop, min(settings.agent_lease_renew, 0.5))
    finally:
        await toolbox.aclose()
        await client.close()
        await lease.release()
        await bus.close()


async def lead(
    settings: Settings,
    instance: str,
    bus: Bus,
    ledger: Ledger,
    client: LazyOpenAI,
    toolbox: Toolbox,
    lease: Lease,
    stop: asyncio.Event,
) -> None:
    """One leadership term: restore, serve, consume; step down on lease loss or stop.

    Everything this process appends from now on carries the term's fence (the lease revision
    at acquisition), also what its tool registry records and the term's own start and end.
    """
    lost = asyncio.Event()
    # Renewed until the term is over, also while a turn finishes after SIGTERM.
    holder = asyncio.create_task(lease.hold(lost))
    ledger.fence = lease.fence
    term = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}:leader", settings=settings)
    agent = Agent(settings, bus, ledger, client, toolbox, lease, lost)
    record = LeadershipTerm(ledger, instance)
    term_stop = asyncio.Event()
    consumer: asyncio.Task[None] | None = None

    async def restore() -> None:
        resume = await agent.restore()
        lease.raise_token(resume.fence_marks.get(lease.singleton, 0))
        ledger.fence = lease.fence
        await record.start(resume.agent_term)

    try:
        await restore_for_takeover(restore, lost=lost, stop=stop)
        if lost.is_set() or stop.is_set():
            return
        await term.serve_ping(SERVICE, ready=lambda: agent.status.ready)
        client.preload()  # ready without the SDK: it loads now, and a turn waits only for what is left
        await term.serve(topics.AGENT_STATE_GET, agent.on_state)
        await term.serve(topics.AGENT_COMPACT, agent.on_compact)
        await term.serve(topics.AGENT_END, agent.on_end)
        await term.serve(topics.AGENT_STOP, agent.on_stop)
        await term.subscribe(topics.LEDGER_COMMITTED, agent.on_committed)
        await term.subscribe(topics.AGENT_INPUT, agent.inputs.on_published)  # memory's head start
        await toolbox.serve(term)
        consumer = asyncio.create_task(
            term.consume(
                topics.AGENT_INPUT,
                agent.on_input,
                durable=streams.AGENT_WORKER,
                stream="AGENT",
                stop=term_stop,
                ack_wait=settings.agent_ack_wait,
                max_deliver=settings.agent_max_deliver,
            )
        )
        log.info("leading: consuming input")
        waiters = [asyncio.create_task(lost.wait()), asyncio.create_task(stop.wait())]
        await asyncio.wait([consumer, *waiters], return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        if consumer.done() and not consumer.cancelled() and consumer.exception():
            log.error("input consumer ended: %r", consumer.exception())
    finally:
        term_stop.set()
        if consumer is not None and not consumer.done():
            if lost.is_set():
                consumer.cancel()  # someone else may lead now: stop this turn at once
            else:
                done, _ = await asyncio.wait([consumer], timeout=settings.stop_grace_s * DRAIN_SHARE)
                if not done:
                    consumer.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await consumer
        await agent.close()
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        with contextlib.suppress(Exception):
            await term.nc.close()
        # Once this term answers nothing more, and before the release: a standby's start can
        # then only follow this end in the ledger.
        await record.end("lost" if lost.is_set() else "shutdown", timeout=settings.stop_grace_s * TERM_END_SHARE)
        ledger.fence = None  # a standby publishes nothing, and the next term brings its own
        if lost.is_set():
            log.warning("stepped down: the lease was lost")
        # A compare-and-set delete: a no-op once another holder wrote the key (or it expired),
        # and after a lease merely unconfirmed (a failed read) it lets the next term start now.
        await lease.release()
