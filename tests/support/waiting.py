"""Waiting in tests: poll a check until it holds, with a deadline, never a fixed sleep.

A check returns the awaited value once the thing has happened (a list, an event, True) and
None or False before; ``eventually`` hands the value back, so the caller asserts on what it
waited for. At the deadline it fails naming what never happened and the last value seen.

A check may be sync or async. When the type of its value holds an explicit ``Any`` (``list[Any]``),
mypy cannot tell the two signatures apart and types the result ``Any``: annotate the variable.
"""

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar, overload

T = TypeVar("T")

INTERVAL_S = 0.05  # between checks: short against the waits, long enough to leave the cores to the services


def _timed_out(what: str, timeout: float, value: object, explain: Callable[[], str] | None) -> AssertionError:
    more = f"\n{explain()}" if explain else ""
    return AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {value!r}){more}")


@overload
async def eventually(check: Callable[[], Awaitable[T | Literal[False] | None]], what: str, timeout: float = 30.0,
                     *, interval: float = INTERVAL_S, explain: Callable[[], str] | None = None) -> T: ...
@overload
async def eventually(check: Callable[[], T | Literal[False] | None], what: str, timeout: float = 30.0,
                     *, interval: float = INTERVAL_S, explain: Callable[[], str] | None = None) -> T: ...
async def eventually(check: Callable[[], object], what: str, timeout: float = 30.0,
                     *, interval: float = INTERVAL_S, explain: Callable[[], str] | None = None) -> object:
    """Call ``check`` (sync or async) until it returns something truthy, and return that.

    ``explain`` adds context to the failure (service logs, the last frames); it runs only then.
    The check runs once more after the deadline, so a slow check still gets a last look.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        value = check()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if loop.time() > deadline:
            raise _timed_out(what, timeout, value, explain)
        await asyncio.sleep(interval)


def eventually_sync(check: Callable[[], T | Literal[False] | None], what: str, timeout: float = 30.0,
                    *, interval: float = INTERVAL_S, explain: Callable[[], str] | None = None) -> T:
    """``eventually`` for synchronous tests and fixtures (no event loop running)."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise _timed_out(what, timeout, value, explain)
        time.sleep(interval)
