"""Releasing a lease whose last renewal landed on the server after the holder stopped waiting
for it (a renewal cancelled mid-flight): the entry is still the holder's, at a revision it never
learned, and must be deleted all the same, or the next holder waits out the whole ttl."""

from delegate.contracts import subjects
from delegate.runtime.bus import Bus
from delegate.runtime.lease import LEASE_KEY, Lease


async def test_a_lease_renewed_behind_the_holders_back_is_still_released(bus: Bus) -> None:
    lease = Lease(bus.js, "voice-1", bucket=subjects.VOICE_LEASE_BUCKET, singleton="voice", ttl=30.0,
                  renew_every=10.0)
    assert await lease.try_acquire()
    kv = await bus.js.key_value(subjects.VOICE_LEASE_BUCKET)
    await kv.update(LEASE_KEY, lease.value, last=lease.revision)  # the renewal the holder never saw
    await lease.release()
    next_holder = Lease(bus.js, "voice-2", bucket=subjects.VOICE_LEASE_BUCKET, singleton="voice", ttl=30.0,
                        renew_every=10.0)
    assert await next_holder.try_acquire()  # at once, not after 30 s


async def test_a_lease_taken_over_meanwhile_is_left_to_its_new_holder(bus: Bus) -> None:
    lease = Lease(bus.js, "voice-1", bucket=subjects.VOICE_LEASE_BUCKET, singleton="voice", ttl=30.0,
                  renew_every=10.0)
    assert await lease.try_acquire()
    kv = await bus.js.key_value(subjects.VOICE_LEASE_BUCKET)
    await kv.update(LEASE_KEY, b"voice-2:1:abcd", last=lease.revision)  # someone else's now
    await lease.release()
    entry = await kv.get(LEASE_KEY)
    assert entry.value == b"voice-2:1:abcd"
