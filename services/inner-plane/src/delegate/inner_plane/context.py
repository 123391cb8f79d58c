"""What every inner-plane component shares: settings, bus, model, the durable state."""

import asyncio
import uuid
from dataclasses import dataclass, field
from functools import cached_property

from delegate.contracts import topics
from delegate.runtime.bus import Bus
from delegate.runtime.metering import Meter
from delegate.runtime.retry import Backoff

from .model import Model
from .settings import Settings
from .state import InnerState, StateFile

# Ids this service derives from another id, so that redoing the same work is deduplicated
# by the ledger (event ids) and by JetStream (Nats-Msg-Id) instead of happening twice.
_NAMESPACE = uuid.UUID("5f1b2d4e-8c0a-4f7e-9d55-2b8f3c1e6a70")


def derived_id(kind: str, key: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, f"{kind}:{key}"))


@dataclass
class Context:
    settings: Settings
    bus: Bus
    model: Model
    state_file: StateFile
    state: InnerState = field(default_factory=InnerState)
    # Set once the first catch-up reached the ledger's newest event: workers act only on
    # current knowledge, never on a half-replayed history (a span whose close is not read yet).
    caught_up: asyncio.Event = field(default_factory=asyncio.Event)
    # The service is shutting down: retry waits end at once.
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @cached_property
    def meter(self) -> Meter:
        """Meters the model calls (capsule, extraction) into this service's ledger subject."""
        return Meter.for_settings(
            self.settings, lambda event: self.bus.publish(topics.ledger_append("inner-plane"), event)
        )

    async def persist(self) -> None:
        """Durable once it returns; the disk work happens off the event loop."""
        await self.state_file.save(self.state)

    def work_backoff(self) -> Backoff:
        """For a model-backed job that failed (capsule, extraction): INNER_RETRY_SECONDS doubling."""
        return Backoff(initial=self.settings.inner_retry_seconds, maximum=self.settings.inner_retry_max_seconds)
