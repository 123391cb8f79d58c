"""Helpers of the bus tests."""

import asyncio
from collections.abc import Callable

from delegate.contracts.events import Event, Message, make_event


def event(text: str = "hi") -> Event:
    return make_event(Message(text=text), conversation_id="c", span_id="s", channel="text", role="user")


async def until(predicate: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
