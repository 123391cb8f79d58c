"""The host: several services on one uvloop event loop, stopped in the launcher's order.

Why one process: each Python process costs about 44 MB before it runs a line of ours, so
eight services in eight interpreters cannot get small. In one, each service keeps what made
it a service: its own NATS connection and identity, settings, durable consumers, leases and
log name (``hosted``). What a process of its own did for it, the host does: a service that
fails is restarted here with backoff; SIGTERM stops every service within its stop grace.

Every service's code is imported on a worker thread (the loop stays free for signals), all of
it before any service but the ledger runs: a service importing a library lazily on the loop
while the thread imports another service's code can see that library half-initialized (Python
accepts a partially initialized module to break a concurrent circular import; a host test met
"partially initialized module 'httpx'" when every service started as soon as it was imported).
The ledger (``catalog.START_FIRST``) is the exception: it runs as soon as its own code is
imported, so its writer process imports on the other core while this one imports the rest.
"""

import asyncio
import gc
import logging
import os
import signal
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable

import uvloop

from delegate.runtime.exits import exit_now
from delegate.runtime.logs import configure_logging
from delegate.runtime.service import exit_unless_stopped_within

from .catalog import START_FIRST, stop_stages
from .hosted import DEFAULT_STOP_GRACE_S, Hosted

log = logging.getLogger("delegate.host")


class Refused(Exception):
    """A service refused its settings (``SettingsRefused``, a SystemExit, which a task must not
    raise: asyncio would end the loop with it, stopping no service)."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def _load(name: str) -> Hosted:
    try:
        return Hosted.load(name)
    except SystemExit as exc:  # it printed why already
        raise Refused(exc.code if isinstance(exc.code, int) else 1) from None


def _load_all(names: list[str]) -> list[Hosted]:
    return [_load(name) for name in names]


async def loaded(
    names: list[str], into: list[Hosted], imported: Callable[[], None] = lambda: None
) -> AsyncIterator[Hosted]:
    """Each named service, its module imported and its settings read (also appended to
    ``into``): those of ``START_FIRST`` as soon as they are imported, then the others in
    ``names``'s order once every one of them is imported, so that no import runs on the worker
    thread while any of them runs; ``imported`` is called then. A refused setting raises
    ``Refused``."""
    loop = asyncio.get_running_loop()
    first = [name for name in names if name in START_FIRST]
    rest = [name for name in names if name not in START_FIRST]
    for batch in (first, rest):
        services = await loop.run_in_executor(None, _load_all, batch) if batch else []
        if batch is rest:
            imported()
        for hosted in services:
            into.append(hosted)
            yield hosted


def collect_from_now_on() -> None:
    """The cyclic collector, off while the services were imported (``__main__``), runs again;
    what they imported (modules, classes, validators: they live as long as the host) is frozen
    first, so no collection scans it again."""
    gc.freeze()
    gc.enable()


async def serve_all(hosted: Iterable[Hosted] | AsyncIterable[Hosted], stopping: asyncio.Event) -> None:
    """Run every service (each as soon as ``hosted`` yields it) until ``stopping``, then stop
    them stage by stage within the grace. A failure to load one (``Refused``) stops those
    already running, then is raised."""
    tasks: dict[str, asyncio.Task[None]] = {}
    by_name: dict[str, Hosted] = {}

    async def start_each() -> None:
        async for h in _each(hosted):
            by_name[h.name] = h
            tasks[h.name] = asyncio.create_task(h.run(), name=h.name)
        log.info("hosting %s", ", ".join(tasks))

    loading = asyncio.create_task(start_each())
    stop_asked = asyncio.create_task(stopping.wait())
    await asyncio.wait([loading, stop_asked], return_when=asyncio.FIRST_COMPLETED)
    if not loading.done() or loading.exception() is None:
        await stopping.wait()
    loading.cancel()  # a stop while loading: the services not started yet are not started
    stop_asked.cancel()
    outcome = (await asyncio.gather(loading, return_exceptions=True))[0]
    failed = outcome if isinstance(outcome, Exception) else None
    grace = max((h.stop_grace_s for h in by_name.values()), default=DEFAULT_STOP_GRACE_S)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    for stage in stop_stages(list(tasks)):
        for name in stage:
            by_name[name].stop.set()
        waiting = [tasks[name] for name in stage]
        if waiting:
            await asyncio.wait(waiting, timeout=max(0.0, deadline - loop.time()))
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)
    if failed is not None:
        raise failed


async def _each(hosted: Iterable[Hosted] | AsyncIterable[Hosted]) -> AsyncIterator[Hosted]:
    if isinstance(hosted, AsyncIterable):
        async for h in hosted:
            yield h
    else:
        for h in hosted:
            yield h


def run(names: list[str]) -> None:
    """Serve the named services until SIGTERM or SIGINT, each started once loaded (a refused
    setting ends the host with EX_CONFIG, as a process of its own would end)."""
    level = os.environ.get("LOG_LEVEL", "INFO")
    configure_logging("host", level)

    async def main() -> None:
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        hosted: list[Hosted] = []

        def on_signal() -> None:
            if not stopping.is_set():
                # The longest grace of the services loaded so far (the default before any).
                exit_unless_stopped_within(max((h.stop_grace_s for h in hosted), default=DEFAULT_STOP_GRACE_S))
            stopping.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        try:
            await serve_all(loaded(names, hosted, imported=collect_from_now_on), stopping)
        except Refused as refused:  # it said why when it was raised
            log.error("stopped: a service refused its settings")
            exit_now(refused.code)
        log.info("stopped")

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
        exit_now(0)  # before the runner's close, which waits for its executor (see exit_now)
