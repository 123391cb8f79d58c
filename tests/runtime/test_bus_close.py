"""A bus's close ends within its bound even when its server has stopped answering (``bus.closing``),
and even when one of its background tasks lost a cancellation.

nats-py's drain, cancelled at its timeout, went on to flush and waited 10 s more for a PONG:
15 s in all, which held an in-process gateway's stop past the tests' 15 s once.
"""

import asyncio
import signal

from delegate.contracts import topics
from delegate.contracts.messages import AgentState
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from delegate.runtime.bus.closing import CLOSE_S, DRAIN_S

# The close's own bound with room for a loaded machine; a hang is forever, the old close 15 s.
CLOSE_BOUND_S = DRAIN_S + CLOSE_S + 4.0


async def test_a_close_ends_when_the_server_has_stopped_answering(nats_server: NatsServer) -> None:
    bus = await Bus.connect(nats_server.url, "test")

    async def ignore(_: AgentState) -> None:
        return None

    await bus.subscribe(topics.AGENT_STATE, ignore)  # a subscription to drain, as every service has
    server = nats_server.proc.proc if nats_server.proc else None
    assert server is not None
    server.send_signal(signal.SIGSTOP)  # alive, its socket open, answering nothing
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        closing = asyncio.ensure_future(bus.close())
        done, _ = await asyncio.wait({closing}, timeout=CLOSE_BOUND_S)
        took = loop.time() - began
        if not done:
            closing.cancel()
            await asyncio.gather(closing, return_exceptions=True)
        assert done, f"the close had not ended {took:.1f} s after it began"
        closing.result()
    finally:
        server.send_signal(signal.SIGCONT)
    assert bus.nc.is_closed


async def test_a_close_ends_a_task_that_lost_its_first_cancellation(nats_server: NatsServer) -> None:
    """On Python 3.11 an ``asyncio.wait_for`` that completes in the step its task is cancelled
    returns its result and the cancellation is gone (gh-86296): the gateway's ledger follower
    then went on retrying a ledger that had stopped, and its stop waited 30 s. Here a task
    loses its first cancellation on purpose; the close still ends it."""
    bus = await Bus.connect(nats_server.url, "test")
    retries = 0
    waiting = asyncio.Event()

    async def follower() -> None:
        nonlocal retries
        me = asyncio.current_task()
        assert me is not None
        while True:
            try:
                waiting.set()
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                retries += 1
                if retries > 1:
                    raise
                me.uncancel()  # as the lost one was

    task = bus.spawn(follower())
    await waiting.wait()
    closing = asyncio.ensure_future(bus.close())
    done, _ = await asyncio.wait({closing}, timeout=CLOSE_BOUND_S)
    if not done:
        closing.cancel()
        await asyncio.gather(closing, task, return_exceptions=True)
    assert done, "the close waited for a task that had lost its cancellation"
    closing.result()
    assert task.cancelled() and retries == 2
