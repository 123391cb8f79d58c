"""The real inner plane's idle check: one checkpoint, the span closes, the conversation goes on."""

from collections.abc import Callable

import pytest

from tests.agent.chat import ChatClient
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.support.standin import StandinProcess
from tests.support.system import System

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_an_idle_span_is_checkpointed_once_and_the_next_message_opens_a_new_span(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system(IDLE_SPAN_SECONDS="2").start("ledger", "agent", "inner-plane", "gateway")
    chat = await ChatClient.open(system)
    try:
        first = await chat.send("I water the plants on Sundays.")
        answer = await chat.answer(first)
        closed = await chat.wait_for(lambda: chat.events("span.closed"), "the idle span to close", timeout=40)
        [checkpoint] = chat.events("checkpoint")
        assert closed[0]["span_id"] == checkpoint["span_id"] == answer["span_id"]
        assert closed[0]["payload"]["reason"] == "idle"
        assert checkpoint["payload"]["turn_ids"] == [first]
        assert checkpoint["payload"]["after_seq"] == 0
        assert checkpoint["payload"]["through_seq"] >= answer["seq"]

        second = await chat.send("And the herbs every other day.")
        again = await chat.answer(second)
        assert again["conversation_id"] == answer["conversation_id"]
        assert again["span_id"] != answer["span_id"]
        opened = chat.events("span.opened")
        assert [e["span_id"] for e in opened] == [answer["span_id"], again["span_id"]]
        # Still exactly one checkpoint and one close for the first span.
        assert len([e for e in chat.events("checkpoint") if e["span_id"] == answer["span_id"]]) == 1
        assert len([e for e in chat.events("span.closed") if e["span_id"] == answer["span_id"]]) == 1
    finally:
        await chat.close()
