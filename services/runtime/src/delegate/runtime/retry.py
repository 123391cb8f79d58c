"""Retries and backoff, once for every service: tenacity underneath, the stop event honoured.

Two shapes cover every loop we had written by hand:

- ``retrying(...)``: try one operation until it succeeds, a deadline or attempt count runs
  out, or ``stop`` is set; then the last exception is raised as it was::

      async for attempt in retrying(retry_on=TRANSIENT, deadline=30.0, stop=stop):
          with attempt:
              await bus.js.publish(...)

- ``Backoff``: a long-running loop (a follower, a reconnecting client) that sleeps longer
  after each failure and starts over after a success::

      backoff = Backoff(initial=0.25, maximum=5.0)
      while not stop.is_set():
          try:
              await follow()
              backoff.reset()
          except ConnectionError:
              if not await backoff.sleep(stop):
                  break  # stopping

tenacity rather than stamina: stamina's value is its defaults and instrumentation, but its
retries cannot be ended by our stop event, and tenacity's ``AsyncRetrying`` takes the sleep
and stop hooks that make a SIGTERM end a wait at once instead of after the backoff.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable

import tenacity
from tenacity import AsyncRetrying, RetryCallState

log = logging.getLogger(__name__)

ExceptionTypes = type[BaseException] | tuple[type[BaseException], ...]


async def sleep_unless(stop: asyncio.Event | None, seconds: float) -> bool:
    """Sleep ``seconds``, or less if ``stop`` is set meanwhile; False when stopping."""
    if stop is None:
        await asyncio.sleep(seconds)
        return True
    if stop.is_set():
        return False
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=seconds)
    return not stop.is_set()


def _jittered(initial: float, maximum: float, jitter: float) -> tenacity.wait.wait_base:
    # exponential from ``initial`` doubling to ``maximum``, plus up to ``jitter`` x initial random
    return tenacity.wait_exponential_jitter(multiplier=initial, max=maximum, exp_base=2, jitter=initial * jitter)


def retrying(
    *,
    retry_on: ExceptionTypes = Exception,
    stop: asyncio.Event | None = None,
    deadline: float | None = None,
    attempts: int | None = None,
    initial: float = 0.05,
    maximum: float = 1.0,
    jitter: float = 0.5,
    what: str | None = None,
) -> AsyncRetrying:
    """An ``AsyncRetrying`` that reraises the last error when it gives up.

    It gives up when ``deadline`` seconds have passed (no sleep is begun that would end past
    it), after ``attempts`` tries, or as soon as ``stop`` is set (also during a sleep). ``what``
    names the operation in the warning logged before each retry; without it retries are quiet.
    """
    stops: list[tenacity.stop.stop_base] = []
    if deadline is not None:
        stops.append(tenacity.stop_before_delay(deadline))
    if attempts is not None:
        stops.append(tenacity.stop_after_attempt(attempts))
    if stop is not None:
        event = stop
        stops.append(tenacity.stop_when_event_set(event))  # type: ignore[arg-type]

    async def sleep(seconds: float) -> None:
        await sleep_unless(stop, seconds)

    def before_sleep(state: RetryCallState) -> None:
        if what is not None and state.outcome is not None:
            log.warning("%s failed (attempt %d), retrying: %r", what, state.attempt_number, state.outcome.exception())

    return AsyncRetrying(
        sleep=sleep,
        stop=tenacity.stop_any(*stops) if stops else tenacity.stop_never,
        wait=_jittered(initial, maximum, jitter),
        retry=tenacity.retry_if_exception_type(retry_on),
        before_sleep=before_sleep,
        reraise=True,
    )


class Backoff:
    """Capped exponential delays for a loop that keeps going; ``reset()`` after a success."""

    def __init__(self, *, initial: float = 0.25, maximum: float = 5.0, jitter: float = 0.5) -> None:
        self._wait: Callable[[RetryCallState], float] = _jittered(initial, maximum, jitter)
        self.failures = 0

    def reset(self) -> None:
        self.failures = 0

    def next_delay(self) -> float:
        """Count one more failure and return how long to wait before the next try."""
        self.failures += 1
        state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
        state.attempt_number = self.failures
        return float(self._wait(state))

    async def sleep(self, stop: asyncio.Event | None = None) -> bool:
        """Wait the next delay; False if ``stop`` was set (the loop should end)."""
        return await sleep_unless(stop, self.next_delay())
