"""The memory service in one object: the index, the follower that keeps it current, the bus
handlers that answer from it, and (when installed) per-turn extraction."""

import asyncio
import importlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from zoneinfo import ZoneInfo

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.ids import utcnow
from delegate.contracts.memory import ImportStatus, ImportStatusRequest, MemorySearchReply, MemorySearchRequest
from delegate.contracts.messages import Ping, Pong
from delegate.runtime.bus import Bus, DomainError

from .commands import FactCommands
from .date_offers import DateOffers
from .follower import LedgerFollower
from .index import MemoryIndex
from .people_commands import PeopleCommands
from .ranking import search
from .settings import Settings

if TYPE_CHECKING:
    from .vectors import VectorWorker

log = logging.getLogger(__name__)

SERVICE = "memory"


class Worker(Protocol):
    """What the service runs beside its follower (per-turn extraction)."""

    def on_event(self, event: Event) -> None: ...

    async def run(self) -> None: ...


def _vectors(index: MemoryIndex, settings: Settings) -> tuple["VectorWorker | None", str]:
    """The background embedder when MEMORY_EMBEDDINGS is on and installed; else why not."""
    if not settings.memory_embeddings:
        return None, ""
    from . import embedder

    why = embedder.missing()
    if why is not None:
        log.warning("MEMORY_EMBEDDINGS is on but %s: searching full text only", why)
        return None, f"embeddings: not installed, full text only ({why})"
    from .vectors import VectorWorker

    return VectorWorker(index, embedder.load), ""


def _extractor(bus: Bus, index: MemoryIndex, settings: Settings, stop: asyncio.Event) -> Worker | None:
    # Imported by name: the service runs (index and search only) where extraction is not installed.
    try:
        module = importlib.import_module(f"{__package__}.extraction")
    except ImportError as exc:
        log.warning("per-turn extraction is not available (%s): the index only", exc)
        return None
    worker: Worker = module.Extractor(bus=bus, index=index, settings=settings, stop=stop)
    return worker


class MemoryService:
    def __init__(self, settings: Settings, bus: Bus, stop: asyncio.Event, *, extract: bool = True) -> None:
        self.settings = settings
        self.bus = bus
        self.stop = stop
        self.index = MemoryIndex(settings.index_path)
        self.vectors, self._vectors_off = _vectors(self.index, settings)
        extracting = extract and settings.memory_extraction
        self.extractor = _extractor(bus, self.index, settings, stop) if extracting else None
        self.follower = LedgerFollower(bus, self.index, settings, stop, on_applied=self._applied)
        self.commands = FactCommands(bus, self.index, self.follower)
        self.people = PeopleCommands(self.commands, self.index, ZoneInfo(settings.owner_timezone))
        self.date_offers = DateOffers(bus, self.index, stop)
        self.failed = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    def ready(self) -> bool:
        return self.follower.caught_up.is_set() and not self.failed.is_set()

    def _applied(self, events: Sequence[Event]) -> None:
        self.date_offers.on_applied(events)
        if self.vectors is not None:
            self.vectors.wake()
        if self.extractor is None:
            return
        for event in events:
            try:
                self.extractor.on_event(event)
            except Exception:
                log.exception("extraction failed to take event %s (%s)", event.id, event.kind)

    async def start(self) -> None:
        await self.follower.start()
        if self.vectors is not None:
            self.vectors.start()
        await self.bus.serve(topics.MEMORY_SEARCH, self._search)
        await self.bus.serve(topics.MEMORY_FACTS, self.commands.handle)
        await self.bus.serve(topics.MEMORY_IMPORT, self._import_status)
        await self.bus.serve(topics.MEMORY_PEOPLE, self.people.people)
        await self.bus.serve(topics.MEMORY_COMMITMENTS, self.people.commitments)
        await self.bus.serve(topics.PINGS[SERVICE], self._ping)
        self._tasks.append(asyncio.create_task(self._guard("follower", self.follower.run())))
        self._tasks.append(asyncio.create_task(self._guard("date offers", self._offer_dates())))
        if self.extractor is not None:
            self._tasks.append(asyncio.create_task(self._guard("extractor", self._extract())))

    async def _offer_dates(self) -> None:
        # offers are raised from a caught-up index: a replay's old offers are seen committed first
        await self.follower.caught_up.wait()
        await self.date_offers.run()

    async def _extract(self) -> None:
        # Extraction reads current knowledge only, never a half-replayed history.
        await self.follower.caught_up.wait()
        assert self.extractor is not None
        await self.extractor.run()

    async def _guard(self, name: str, work: Any) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s failed", name)
            self.failed.set()
            return
        if not self.stop.is_set():
            log.error("%s ended before the service was stopped", name)
            self.failed.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.vectors is not None:
            await asyncio.to_thread(self.vectors.close)
        self.index.close()

    # ---- handlers --------------------------------------------------------------------------

    async def _search(self, req: MemorySearchRequest) -> MemorySearchReply:
        dense = self.vectors.dense if self.vectors is not None else None
        now = req.now or utcnow()
        if dense is None and req.purpose != "owner":
            # A model request waits for this one: answered here, on the loop. Handed to a worker
            # thread and back, it waited for the GIL while the loop worked: received to answered
            # 6.2-6.9 ms p50 that way, 1.4-1.5 ms on the loop, under load 15-18 (issue #27).
            return search(self.index, req, now, self.settings.memory_context_tokens, None)
        # A worker thread (each has its own read connection): embedding the query takes
        # milliseconds of CPU, and an owner's search of a large index tens of them, which the
        # follower and the fact commands on this loop would wait for.
        return await asyncio.to_thread(search, self.index, req, now, self.settings.memory_context_tokens, dense)

    async def _import_status(self, req: ImportStatusRequest) -> ImportStatus:
        status = self.index.import_status(req.import_id)
        if status is None:
            raise DomainError("not_found", f"no import {req.import_id} in the index")
        return status

    async def _ping(self, _: Ping) -> Pong:
        through = self.index.last_seq
        ready = self.ready()
        if ready:
            detail = f"indexed_through_seq={through}"
        else:
            detail = f"catching up: indexed_through_seq={through} of ledger seq {self.follower.ledger_seq}"
        counts = {"indexed_through_seq": through, "ledger_seq": self.follower.ledger_seq}
        if self.vectors is not None:
            detail += f"; {self.vectors.detail()}"
            dense = self.vectors.dense
            if dense is not None:
                counts |= {"vectors": dense.count(), "embedded_through_seq": dense.embedded_through_seq}
        elif self._vectors_off:
            detail += f"; {self._vectors_off}"
        return Pong(service=SERVICE, instance=self.bus.service, ready=ready, detail=detail, counts=counts)
