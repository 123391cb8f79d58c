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

from openai import AsyncOpenAI

from delegate.contracts import streams, topics
from delegate.runtime.bus import Bus, BusUnavailable
from delegate.runtime.service import run_service

from .agent import Agent
from .lease import Lease
from .lease_session import LeaseSession
from .ledger import Ledger, LedgerUnavailable
from .settings import Settings
from .toolbox import Toolbox

log = logging.getLogger(__name__)

SERVICE = "agent"
SHUTDOWN_GRACE = 5.0  # a turn running at SIGTERM may finish within this; then it is handed back
# Recording session.ended may not hold up a shutdown or a step-down longer than this.
SESSION_END_TIMEOUT = 5.0


def run() -> None:
    run_service(SERVICE, Settings(), serve)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    instance = settings.instance_name or socket.gethostname()
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}")
    await bus.ensure_streams()
    ledger = Ledger(bus)
    client = AsyncOpenAI(max_retries=settings.openai_max_retries, timeout=settings.openai_timeout)
    toolbox = await Toolbox.start(settings, bus, ledger)
    lease = Lease(bus.js, instance, ttl=settings.agent_lease_ttl, renew_every=settings.agent_lease_renew)
    log.info(
        "agent %s standing by for the lease (model %s, compaction at %d input tokens, capsule refresh at %.0f%%)",
        instance, settings.openai_model, settings.compact_threshold, 100 * settings.capsule_threshold,
    )
    try:
        while not stop.is_set():
            if await lease.try_acquire():
                await lead(settings, instance, bus, ledger, client, toolbox, lease, stop)
                continue
            await _sleep_unless(stop, min(settings.agent_lease_renew, 0.5))
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
    client: AsyncOpenAI,
    toolbox: Toolbox,
    lease: Lease,
    stop: asyncio.Event,
) -> None:
    """One leadership term: restore, serve, consume; step down on lease loss or stop."""
    lost = asyncio.Event()
    # Renewed until the term is over, also while a turn finishes after SIGTERM.
    holder = asyncio.create_task(lease.hold(lost))
    term = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}:leader")
    agent = Agent(settings, bus, ledger, client, toolbox)
    session = LeaseSession(ledger, instance)
    term_stop = asyncio.Event()
    consumer: asyncio.Task[None] | None = None
    try:
        while not (lost.is_set() or stop.is_set()):
            try:
                resume = await agent.restore()
                await session.start(resume.agent_session)
                break
            except (LedgerUnavailable, BusUnavailable) as exc:
                log.warning("waiting for the ledger before taking over: %s", exc)
                await _sleep_unless(stop, 1.0)
        if lost.is_set() or stop.is_set():
            return
        await term.serve_ping(SERVICE, ready=lambda: agent.ready)
        await term.serve(topics.AGENT_STATE_GET, agent.on_state)
        await term.serve(topics.AGENT_COMPACT, agent.on_compact)
        await term.serve(topics.AGENT_END, agent.on_end)
        await term.subscribe(topics.LEDGER_COMMITTED, agent.on_committed)
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
                done, _ = await asyncio.wait([consumer], timeout=SHUTDOWN_GRACE)
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
        await session.end("lost" if lost.is_set() else "shutdown", timeout=SESSION_END_TIMEOUT)
        if lost.is_set():
            log.warning("stepped down: the lease was lost")
        else:
            await lease.release()


async def _sleep_unless(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
