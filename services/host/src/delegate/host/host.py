"""The host: several services on one uvloop event loop, stopped in the launcher's order.

Why one process: each Python process costs about 44 MB before it runs a line of ours, so
eight services in eight interpreters cannot get small. In one, each service keeps what made
it a service: its own NATS connection and identity, settings, durable consumers, leases and
log name (``hosted``). What a process of its own did for it, the host does: a service that
fails is restarted here with backoff; SIGTERM stops every service within its stop grace.
"""

import asyncio
import logging
import os
import signal

import uvloop

from delegate.runtime.logs import configure_logging
from delegate.runtime.service import exit_unless_stopped_within

from .catalog import stop_stages
from .hosted import Hosted

log = logging.getLogger("delegate.host")


async def serve_all(hosted: list[Hosted], stopping: asyncio.Event) -> None:
    """Run every service until ``stopping``, then stop them stage by stage within the grace."""
    tasks = {h.name: asyncio.create_task(h.run(), name=h.name) for h in hosted}
    log.info("hosting %s", ", ".join(tasks))
    await stopping.wait()
    grace = max(h.stop_grace_s for h in hosted)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    by_name = {h.name: h for h in hosted}
    for stage in stop_stages(list(tasks)):
        for name in stage:
            by_name[name].stop.set()
        waiting = [tasks[name] for name in stage]
        if waiting:
            await asyncio.wait(waiting, timeout=max(0.0, deadline - loop.time()))
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)


def run(names: list[str]) -> None:
    """Load every named service's settings (a refused one ends the start with EX_CONFIG, as in a
    process of its own), then serve them all until SIGTERM or SIGINT."""
    level = os.environ.get("LOG_LEVEL", "INFO")
    configure_logging("host", level)
    hosted = [Hosted.load(name) for name in names]

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        grace = max(h.stop_grace_s for h in hosted)

        def on_signal() -> None:
            if not stopping.is_set():
                exit_unless_stopped_within(grace)
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await serve_all(hosted, stopping)
        log.info("stopped")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
