"""What we need of the nats-server, checked against real servers: Debian's 2.9 and the pinned one.

2.9 takes a stream that allows message schedules or atomic batches without a word (it drops the
fields) and then never fires a schedule: the check must say so before anything relies on it.
"""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from delegate.contracts import topics
from delegate.contracts.streams import STREAMS
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import ATOMIC_BATCHES, MESSAGE_SCHEDULES, BatchRefused, Bus, ServerUnsuitable
from tests.support.nats import start_debian_nats

from .bus_support import event

pytestmark = pytest.mark.integration  # starts processes


@pytest.fixture
async def old_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    server = start_debian_nats(tmp_path / "debian-nats")
    bus = await Bus.connect(server.url, "test")
    try:
        yield bus
    finally:
        await bus.close()
        server.stop()


async def test_an_old_server_is_refused_naming_the_version_found_and_the_one_needed(old_bus: Bus) -> None:
    with pytest.raises(ServerUnsuitable) as refused:
        old_bus.require_server(MESSAGE_SCHEDULES)
    message = str(refused.value)
    assert "nats-server 2.9.10 is too old" in message
    assert "message schedules (reminders fire from them) came in 2.12.0" in message
    assert "Run nats-server 2.12.0 or newer" in message
    assert refused.value.found == "2.9.10" and refused.value.lacking == (MESSAGE_SCHEDULES,)


async def test_an_old_server_gets_no_stream_whose_settings_it_would_ignore(old_bus: Bus) -> None:
    reminders = [spec for spec in STREAMS if spec.schedules]
    with pytest.raises(ServerUnsuitable, match="message schedules"):
        await old_bus.ensure_streams(reminders)
    assert await _stream_names(old_bus) == []
    # A stream that needs nothing new is made as before.
    await old_bus.ensure_streams([spec for spec in STREAMS if spec.name == "AGENT"])
    assert await _stream_names(old_bus) == ["AGENT"]


async def test_an_atomic_batch_is_refused_whole_by_an_old_server_instead_of_stored_piecemeal(old_bus: Bus) -> None:
    ledger = [spec for spec in STREAMS if spec.name == "LEDGER"]
    # The stream exists as the ledger of an older release made it (before it checked).
    await old_bus.js.add_stream(name="LEDGER", subjects=list(ledger[0].subjects))
    events = [event(), event()]
    with pytest.raises(BatchRefused, match="atomic batch publish"):
        await old_bus.publish_batch(topics.ledger_append("test"), events, msg_ids=[e.id for e in events])
    assert (await old_bus.js.stream_info("LEDGER")).state.messages == 0


async def test_the_pinned_server_has_everything(nats_server: NatsServer) -> None:
    bus = await Bus.connect(nats_server.url, "test")
    try:
        bus.require_server(MESSAGE_SCHEDULES, ATOMIC_BATCHES)
        await bus.ensure_streams(all_owners=True)
        assert (await bus.js.stream_info("REMINDERS")).config.allow_msg_schedules
    finally:
        await bus.close()


async def _stream_names(bus: Bus) -> list[str]:
    return sorted(str(info.config.name) for info in await bus.js.streams_info())
