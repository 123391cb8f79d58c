"""The fenced singleton lease on a real JetStream KV bucket."""

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from delegate.contracts import subjects
from delegate.contracts.events import Fence
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.runtime.lease import LEASE_KEY, Lease
from tests.agent.rig import LEASE_TTL, Probe, term_rows
from tests.support.system import System
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]


def lease(bus: Bus, holder: str, ttl: float = LEASE_TTL) -> Lease:
    return Lease(
        bus.js, holder, bucket=subjects.AGENT_LEASE_BUCKET, singleton="agent", ttl=ttl, renew_every=ttl / 3
    )


async def test_one_holder_at_a_time_and_takeover_after_expiry(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        a, b = lease(bus, "a"), lease(bus, "b")
        assert await a.try_acquire()
        assert not await b.try_acquire()
        first = a.token
        assert first is not None and a.fence == Fence(singleton="agent", token=first)
        # While a renews, b never gets in: b tries between each of a's renewals (the renewals,
        # seen as growing revisions, are the positive marker that time passed with a holding).
        lost = asyncio.Event()
        holding = asyncio.create_task(a.hold(lost))
        for _ in range(3):
            before = a.revision or 0

            def renewed(before: int = before) -> bool:
                return (a.revision or 0) > before

            await eventually(renewed, "a renewal")
            assert not await b.try_acquire()
            assert await a.confirm()
        # Renewals move the revision, never the term's fencing token.
        assert a.token == first and (a.revision or 0) > first
        holding.cancel()  # a "dies": no more renewals
        await eventually(b.try_acquire, "b to take over after the ttl")
        # The successor's token is higher: the ledger can tell the terms apart by it.
        assert b.token is not None and b.token > first
        # a's fresh read shows the lease is not its own any more, and its renewal fails.
        assert not await a.confirm()
        assert not await a.renew()
        assert not a.held and a.in_doubt()
        assert a.fence == Fence(singleton="agent", token=first)  # kept for what the old term still says
        # A clean release lets the other one in at once, without waiting for the ttl.
        await b.release()
        assert await a.try_acquire()
        assert (a.token or 0) > b.token
        assert not lost.is_set()
    finally:
        await bus.close()


async def test_a_failed_renewal_reports_the_loss(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        a = lease(bus, "a")
        assert await a.try_acquire()
        a.revision = (a.revision or 0) + 100  # someone else wrote since: compare-and-set must fail
        lost = asyncio.Event()
        await asyncio.wait_for(a.hold(lost), timeout=10)
        assert lost.is_set() and not a.held
    finally:
        await bus.close()


async def test_the_lease_is_in_doubt_once_renewals_stop(nats_url: str) -> None:
    """No I/O needed: a holder whose renewals stopped (paused, cut off) knows from its clock."""
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        a = lease(bus, "a", ttl=3.0)
        assert await a.try_acquire()
        assert not a.in_doubt()
        await eventually(a.in_doubt, "the lease to fall in doubt without renewals")
        assert await a.confirm()  # still ours (nobody took it yet) ...
        assert await a.renew() and not a.in_doubt()  # ... and a renewal settles the doubt
    finally:
        await bus.close()


async def test_an_agent_that_loses_its_lease_steps_down_and_later_leads_again(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]]
) -> None:
    system = make_system().start("ledger", "agent")
    probe = await probe_for(system)
    assert (await probe.bus.ping("agent")).ready
    kv = await probe.bus.js.key_value(subjects.AGENT_LEASE_BUCKET)
    await kv.put(LEASE_KEY, b"someone-else")  # its next compare-and-set renewal must fail

    async def silent() -> bool:
        try:
            await probe.bus.ping("agent", timeout=0.3)
        except (BusUnavailable, RemoteError):
            return True
        return False

    async def leading() -> bool:
        return not await silent()

    await eventually(silent, "the agent to step down")
    # Nobody renews the foreign entry: it expires, and the same process leads again.
    await eventually(leading, "the agent to lead again", timeout=30)
    msg = await probe.send("still answering?")
    assert (await probe.answer(msg.id)).kind == "message"

    # Two terms: the first ended as lost (by itself, so not superseded).
    def two_terms() -> list[dict[str, object]] | None:
        rows = term_rows(system)
        return rows if len(rows) == 2 else None

    rows = await probe.wait_for(two_terms, "the second term")
    assert [r["end_reason"] for r in rows] == ["lost", None]
    # The same process both times (its instance name: INSTANCE_NAME, else the host's name).
    assert rows[1]["supersedes"] is None and rows[0]["holder"] == rows[1]["holder"]


async def test_the_bucket_follows_the_configured_ttl(nats_url: str) -> None:
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        assert await lease(bus, "a", ttl=6.0).try_acquire()
        b = lease(bus, "b", ttl=3.0)
        assert not await b.try_acquire()
        info = await bus.js.stream_info(f"KV_{subjects.AGENT_LEASE_BUCKET}")
        assert info.config.max_age == pytest.approx(3.0)
        await eventually(b.try_acquire, "the shorter ttl to let b in")
    finally:
        await bus.close()


async def test_a_restarted_holder_reclaims_its_dead_predecessors_lease_at_once_and_nobody_else_can(
    nats_url: str,
) -> None:
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        dead = lease(bus, "tasks", ttl=60.0)  # a ttl far beyond the test: only a reclaim can take it
        assert await dead.try_acquire()
        assert not await lease(bus, "other", ttl=60.0).try_reclaim()  # another holder's name: no
        again = lease(bus, "tasks", ttl=60.0)  # the same instance, started again
        assert await again.try_reclaim()
        assert again.token is not None and dead.token is not None and again.token > dead.token
        assert not await dead.renew() and not await dead.confirm()  # the old run is deposed
        assert not await again.try_reclaim()  # its own entry: nothing to take
        assert await again.confirm()
        await again.release()
        fresh = lease(bus, "tasks", ttl=60.0)
        assert await fresh.try_reclaim()  # nothing held: a plain acquire
    finally:
        await bus.close()
