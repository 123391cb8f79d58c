"""The singleton lease on a real JetStream KV bucket."""

import asyncio

import pytest

from delegate.agent.lease import LEASE_KEY, Lease
from delegate.contracts import subjects
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from tests.agent.rig import session_rows

pytestmark = [pytest.mark.integration]


async def _until(check, what: str, timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not await check():
        assert loop.time() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


async def test_one_holder_at_a_time_and_takeover_after_expiry(nats_url):
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        a = Lease(bus.js, "a", ttl=1.0, renew_every=0.3)
        b = Lease(bus.js, "b", ttl=1.0, renew_every=0.3)
        assert await a.try_acquire()
        assert not await b.try_acquire()
        # While a renews, b never gets in.
        lost = asyncio.Event()
        holding = asyncio.create_task(a.hold(lost))
        for _ in range(6):
            await asyncio.sleep(0.3)
            assert not await b.try_acquire()
        holding.cancel()  # a "dies": no more renewals
        await _until(b.try_acquire, "b to take over after the ttl")
        # a's next renewal fails: it must know it is no longer the leader.
        assert not await a.renew()
        assert not a.held
        # A clean release lets the other one in at once, without waiting for the ttl.
        await b.release()
        assert await a.try_acquire()
        assert not lost.is_set()
    finally:
        await bus.close()


async def test_a_failed_renewal_reports_the_loss(nats_url):
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        a = Lease(bus.js, "a", ttl=1.0, renew_every=0.2)
        assert await a.try_acquire()
        a.revision = (a.revision or 0) + 100  # someone else wrote since: compare-and-set must fail
        lost = asyncio.Event()
        await asyncio.wait_for(a.hold(lost), timeout=5)
        assert lost.is_set() and not a.held
    finally:
        await bus.close()


async def test_an_agent_that_loses_its_lease_steps_down_and_later_leads_again(make_system, probe_for):
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

    await _until(silent, "the agent to step down")
    # Nobody renews the foreign entry: it expires, and the same process leads again.
    await _until(leading, "the agent to lead again", timeout=20)
    msg = await probe.send("still answering?")
    assert (await probe.answer(msg.id)).kind == "message"
    # Two terms, two sessions: the first ended as lost (by itself, so not superseded).
    def two_sessions() -> list[dict[str, object]] | None:
        rows = session_rows(system)
        return rows if len(rows) == 2 else None

    rows = await probe.wait_for(two_sessions, "the second session")
    assert [r["end_reason"] for r in rows] == ["lost", None]
    assert rows[1]["supersedes"] is None and rows[0]["holder"] == rows[1]["holder"] == "agent"


async def test_the_bucket_follows_the_configured_ttl(nats_url):
    bus = await Bus.connect(nats_url, "lease-test")
    try:
        assert await Lease(bus.js, "a", ttl=5.0, renew_every=1.0).try_acquire()
        b = Lease(bus.js, "b", ttl=1.0, renew_every=0.3)
        assert not await b.try_acquire()
        info = await bus.js.stream_info(f"KV_{subjects.AGENT_LEASE_BUCKET}")
        assert info.config.max_age == pytest.approx(1.0)
        await _until(b.try_acquire, "the shorter ttl to let b in")
    finally:
        await bus.close()
