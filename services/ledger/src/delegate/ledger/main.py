"""Entry point: open the store, join the bus, write batches and answer queries until SIGTERM."""

import asyncio
import logging
import sys

from delegate.contracts import streams, topics
from delegate.contracts.messages import Ping, Pong
from delegate.runtime.bus import ATOMIC_BATCHES, Bus, start_when_server_suits
from delegate.runtime.retry import retrying
from delegate.runtime.service import run_service

from .handlers import Ledger
from .settings import Settings
from .store import LedgerStore, StoreUnavailable, open_store
from .writer import WriterProcess, writer_env

SERVICE = "ledger"
log = logging.getLogger(__name__)


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    store = open_store(
        database_url=settings.database_url,
        runtime_data_dir=settings.runtime_data_dir,
        sqlite_journal_mode=settings.sqlite_journal_mode,
    )
    if not await _open(store, stop):
        return
    # Started first: its interpreter's imports (a second or more on a loaded machine) then go on
    # beside the connect and the streams, not after them on every start's path.
    writer = WriterProcess(writer_env(settings, store))
    try:
        await writer.start()
        bus = await Bus.connect(settings.nats_url, settings.instance_name or SERVICE, settings=settings)
        try:
            await _serve(settings, store, bus, writer, stop)
        finally:
            await bus.close()  # drains: acks and announcements already queued still go out
    finally:
        await writer.close()  # a no-op when _serve closed it already
        await store.close()


async def _serve(settings: Settings, store: LedgerStore, bus: Bus, writer: WriterProcess, stop: asyncio.Event) -> None:
    # The LEDGER stream takes atomic batches (imports): an older server would store them piecemeal.
    if not await start_when_server_suits(bus, SERVICE, [ATOMIC_BATCHES], stop):
        return
    try:  # JetStream may still be starting next to us
        async for attempt in retrying(stop=stop, initial=0.2, maximum=1.0, what="ensuring the streams"):
            with attempt:
                await bus.ensure_streams()
    except Exception:
        if stop.is_set():
            return
        raise
    try:
        await _run_ledger(settings, store, bus, writer, stop)
    finally:
        await writer.close()  # after the consumer: it answers the batch in hand, then exits


async def _run_ledger(
    settings: Settings, store: LedgerStore, bus: Bus, writer: WriterProcess, stop: asyncio.Event
) -> None:
    ledger = Ledger(
        store, bus, writer, history_limit=settings.timeline_history_event_limit,
        expansion_cap=settings.ledger_page_expansion_cap, stop=stop, ack_wait=settings.ledger_ack_wait_seconds,
    )
    await ledger.recover()
    marks = await store.fence_marks()  # judged in each transaction; logged here for the operator
    log.info("fence marks: %s", ", ".join(f"{k}={v}" for k, v in sorted(marks.items())) or "none yet")
    await bus.serve(topics.LEDGER_PAGE, ledger.on_page)
    await bus.serve(topics.LEDGER_QUERY, ledger.on_query)
    await bus.serve(topics.LEDGER_GET, ledger.on_get)
    await bus.serve(topics.LEDGER_RESUME, ledger.on_resume)
    await bus.serve(topics.LEDGER_ARTIFACT, ledger.on_artifact)
    await bus.serve(topics.LEDGER_USAGE, ledger.on_usage)
    consumer = asyncio.create_task(
        bus.consume_batches(
            topics.LEDGER_APPEND_ANY, ledger.on_batch, durable=streams.LEDGER_WRITER, stream="LEDGER", stop=stop,
            raw=True,  # validated in the writer process
            batch=settings.ledger_batch_size, ack_wait=settings.ledger_ack_wait_seconds,
            # The next two batches go to the writer while it commits this one: one is validated
            # ahead and one more is on its way, so a late reply or a slow fsync leaves it no gap.
            depth=3,
        ),
        name="ledger-writer",
    )

    async def pong(_: Ping) -> Pong:
        return Pong(service=SERVICE, instance=bus.service, ready=not consumer.done(), counts=dict(ledger.counts))

    await bus.serve(topics.PINGS[SERVICE], pong)
    log.info("ready: writing %s as durable %s", topics.LEDGER_APPEND_ANY.subject, streams.LEDGER_WRITER)
    stopping = asyncio.create_task(stop.wait())
    await asyncio.wait({consumer, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    # On SIGTERM the pull loop stops fetching and returns once its in-flight batch is
    # committed and acked. If it ended on its own, that is a failure: raise it.
    try:
        await consumer
    finally:
        await ledger.drain()  # its announcements go out before the connection drains


async def _open(store: LedgerStore, stop: asyncio.Event) -> bool:
    """Open the store, waiting for a database that is still starting (PostgreSQL in compose)."""
    try:
        async for attempt in retrying(
            retry_on=StoreUnavailable, stop=stop, initial=0.5, maximum=2.0, what="opening the database"
        ):
            with attempt:
                await store.open()
    except StoreUnavailable:
        if stop.is_set():
            return False
        raise
    return True


def run() -> None:
    if sys.argv[1:]:  # a maintenance command (backup, restore, migrate): see cli.py
        from .cli import main

        sys.exit(main(sys.argv[1:]))
    run_service(SERVICE, Settings(), serve)
