"""Helpers of the bus tests."""

from delegate.contracts.events import Event, Message, make_event


def event(text: str = "hi") -> Event:
    return make_event(Message(text=text), conversation_id="c", span_id="s", channel="text", role="user")
