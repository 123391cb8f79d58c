"""The one waiting helper: it returns what it waited for and names what never happened."""

import asyncio

import pytest

from tests.support.waiting import eventually, eventually_sync


async def test_returns_the_value_once_an_async_check_holds() -> None:
    box: list[int] = []
    asyncio.get_running_loop().call_later(0.1, box.append, 7)

    async def seen() -> list[int] | None:
        return list(box) or None

    assert await eventually(seen, "the append", 5) == [7]


async def test_takes_a_sync_check() -> None:
    box: list[str] = []
    asyncio.get_running_loop().call_later(0.1, box.append, "x")
    assert await eventually(lambda: bool(box), "the append", 5) is True


async def test_names_what_never_happened_and_the_last_value() -> None:
    with pytest.raises(AssertionError, match=r"waiting for the reply \(last value: \[\]\)\nlogs: none") as info:
        await eventually(lambda: [], "the reply", 0.1, explain=lambda: "logs: none")
    assert "0.1s" in str(info.value)


def test_sync_twin_returns_the_value_or_names_what_never_happened() -> None:
    calls = iter([None, None, "ready"])
    assert eventually_sync(lambda: next(calls), "the third call", 5, interval=0.01) == "ready"
    with pytest.raises(AssertionError, match=r"waiting for nothing \(last value: False\)"):
        eventually_sync(lambda: False, "nothing", 0.05, interval=0.01)
