"""``python -m delegate.tasks``: wait for the tasks lease, lead until it is lost or we are stopped.

Why a service of its own: a task runs for minutes or hours, drives a Chromium, and must never
hold up a turn; a crash in a page or in the browser must not take the conversation down, and
the runner restarts (and resumes every task from its journal) on its own.

As with the agent, leading is a NATS connection of its own: the commands and the ping are
served on it, so stepping down is closing it, and a standby answers nothing. Every event the
leader writes carries its term's fence, so a runner paused past its lease cannot journal a
step after its successor took the task over.
"""

import asyncio
import contextlib
import logging
import socket

from delegate.contracts import subjects, topics
from delegate.runtime.bus import Bus
from delegate.runtime.lease import Lease
from delegate.runtime.ledger_client import restore_for_takeover
from delegate.runtime.retry import sleep_unless
from delegate.runtime.service import run_service

from .run_pictures import RunPictures
from .service import SERVICE, TasksService
from .settings import Settings

log = logging.getLogger(__name__)


def run() -> None:
    run_service(SERVICE, Settings(), serve)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    instance = settings.instance_name or socket.gethostname()
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}", settings=settings)
    await bus.ensure_streams()
    lease = Lease(bus.js, instance, bucket=subjects.TASKS_LEASE_BUCKET, singleton="tasks",
                  ttl=settings.tasks_lease_ttl, renew_every=settings.tasks_lease_ttl / 3,
                  replicas=settings.nats_replicas)
    log.info("tasks %s standing by for the lease (model %s, %d at once)", instance, settings.model_name,
             settings.tasks_max_concurrent)
    try:
        # A restart of this instance (same INSTANCE_NAME) takes its dead predecessor's lease at
        # once, so every task resumes within seconds instead of after the lease's ttl.
        reclaimed = await lease.try_reclaim()
        while not stop.is_set():
            if reclaimed or await lease.try_acquire():
                reclaimed = False
                await lead(settings, instance, bus, lease, stop)
                continue
            await sleep_unless(stop, 0.5)
    finally:
        await lease.release()
        await bus.close()


async def lead(settings: Settings, instance: str, bus: Bus, lease: Lease, stop: asyncio.Event) -> None:
    lost = asyncio.Event()
    holder = asyncio.create_task(lease.hold(lost))
    term = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}:leader", settings=settings)
    pictures = RunPictures(settings, bus, lambda: lease.fence) if settings.tasks_thoughtflow else None
    service = TasksService(settings, bus, lambda: lease.fence,
                           on_terminal=pictures.task_ended if pictures else lambda record: None)

    async def restore() -> None:
        await service.ledger.wait_caught_up()
        resume = await service.ledger.resume(0)
        lease.raise_token(resume.fence_marks.get(lease.singleton, 0))
        await service.restore()

    try:
        await restore_for_takeover(restore, lost=lost, stop=stop)
        if lost.is_set() or stop.is_set():
            return
        await term.serve_ping(SERVICE, ready=lambda: service.ready and not lost.is_set())
        await term.serve(topics.TASKS_CREATE, service.on_create)
        await term.serve(topics.TASKS_LIST, service.on_list)
        await term.serve(topics.TASKS_GET, service.on_get)
        await term.serve(topics.TASKS_CONTROL, service.on_control)
        if pictures is not None:
            await pictures.start(term, service)
        service.schedule()
        log.info("leading: %d tasks known", len(service.book.tasks))
        waiters = [asyncio.create_task(lost.wait()), asyncio.create_task(stop.wait())]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
    finally:
        with contextlib.suppress(Exception):
            await term.nc.close()
        await service.close()
        if pictures is not None:
            await pictures.close()
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        if lost.is_set():
            log.warning("stepped down: the lease was lost")
        await lease.release()
