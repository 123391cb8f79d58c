"""Every OpenAI call goes through here, so none can be made without its ``model.usage`` event.

A ``Meter`` makes the calls a service makes (``create``, ``compact``, a streamed ``POST
/responses``, a Realtime connection) and writes one ``model.usage`` ledger event per call,
priced when it is written (``pricing``). ``tests/contracts/test_metered_calls.py`` scans the
services for OpenAI calls made anywhere else and fails on one.

A call that fails after the model worked (``response.failed``, a ``failed`` status) carries
its usage and is billed: it is recorded too, marked ``failed`` (an ``incomplete`` one is billed
and recorded like a completed one). A request the
API refused (an HTTP error) carries none and is not billed. A stream that breaks before its
terminal event leaves the usage unknown: nothing is recorded for it (the API never says).

Publishing runs beside the caller: a turn's answer never waits on the ledger for its usage row,
and a ledger that is down loses the row (logged), never the answer.
"""

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from delegate.contracts.events import Channel, Event, ModelUsage, UsagePurpose, make_event

from .pricing import PriceTable, Usage, load_prices

if TYPE_CHECKING:
    from openai import AsyncOpenAI
    from openai.types.responses import Response

log = logging.getLogger(__name__)

Publish = Callable[[Event], Awaitable[object]]
# The streamed events that end a response and carry its usage.
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


@dataclass(frozen=True)
class Cause:
    """Why a call is made and where its usage event goes (its cause's channel and span)."""

    purpose: UsagePurpose
    channel: Channel = "inner"
    cause_id: str | None = None  # the span, turn, activation, task or call id
    conversation_id: str | None = None
    span_id: str | None = None
    parent_id: str | None = None
    # What the usage event must follow in the ledger: a turn's opening events (its user message
    # is the parent), which may still be on their way when a fast response ends.
    after: Callable[[], Awaitable[object]] | None = field(default=None, compare=False, repr=False)


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(key)
    return getattr(obj, key, None)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def usage_of(raw: Any, *, web_search_calls: int = 0) -> Usage:
    """A Responses ``usage`` or a Realtime ``response.done`` usage (dict or SDK model)."""
    details = _get(raw, "input_tokens_details") or _get(raw, "input_token_details")
    out_details = _get(raw, "output_tokens_details") or _get(raw, "output_token_details")
    return Usage(
        input_tokens=_int(_get(raw, "input_tokens")),
        cached_tokens=_int(_get(details, "cached_tokens")),
        output_tokens=_int(_get(raw, "output_tokens")),
        audio_input_tokens=_int(_get(details, "audio_tokens")),
        audio_output_tokens=_int(_get(out_details, "audio_tokens")),
        web_search_calls=web_search_calls,
    )


def searches_in(response: Any) -> int:
    """How many web searches a response ran: its ``tool_usage`` count, else its
    ``web_search_call`` items (each one is billed)."""
    counted = _get(_get(_get(response, "tool_usage"), "web_search"), "num_requests")
    if isinstance(counted, int):
        return counted
    return sum(1 for item in _get(response, "output") or () if _get(item, "type") == "web_search_call")


class Meter:
    def __init__(self, publish: Publish | None, prices: PriceTable, *, enabled: bool = True) -> None:
        """``publish`` writes an event to the ledger (under the service's fence, if it has one);
        None until the service has a bus (``bind``). ``enabled`` False only for measuring what
        metering costs (bench/usage.py)."""
        self.publish = publish
        self.prices = prices
        self.enabled = enabled
        self._pending: set[asyncio.Task[None]] = set()

    @classmethod
    def for_settings(cls, settings: Any, publish: Publish | None = None) -> "Meter":
        """The meter of a service: prices from its runtime-data directory."""
        return cls(publish, load_prices(getattr(settings, "runtime_data_dir", None)))

    def bind(self, publish: Publish) -> None:
        self.publish = publish

    # ---- the event ---------------------------------------------------------------------------

    def priced(self, purpose: UsagePurpose, cause_id: str | None, model: str, usage: Usage, *,
               response_id: str | None = None, failed: bool = False) -> ModelUsage:
        """The ``model.usage`` payload, its cost computed now (later price changes keep it)."""
        return ModelUsage(
            model=model, purpose=purpose, cause_id=cause_id,
            input_tokens=usage.input_tokens, cached_tokens=usage.cached_tokens, output_tokens=usage.output_tokens,
            audio_input_tokens=usage.audio_input_tokens, audio_output_tokens=usage.audio_output_tokens,
            web_search_calls=usage.web_search_calls, cost_usd=self.prices.cost(model, usage),
            response_id=response_id or None, failed=failed or None,
        )

    def event(self, cause: Cause, model: str, usage: Usage, *, response_id: str | None = None,
              failed: bool = False) -> Event:
        return make_event(
            self.priced(cause.purpose, cause.cause_id, model, usage, response_id=response_id, failed=failed),
            conversation_id=cause.conversation_id, span_id=cause.span_id, channel=cause.channel,
            parent_id=cause.parent_id,
        )

    def record(self, cause: Cause, model: str, usage: Usage, *, response_id: str | None = None,
               failed: bool = False) -> None:
        """Write the call's usage event beside the caller (see the module's docstring)."""
        if not self.enabled:
            return
        if self.publish is None:
            log.error("model.usage of %s (%s) not recorded: the meter has no ledger", model, cause.purpose)
            return
        event = self.event(cause, model, usage, response_id=response_id, failed=failed)
        task = asyncio.get_running_loop().create_task(self._publish(event, cause.after))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _publish(self, event: Event, after: Callable[[], Awaitable[object]] | None = None) -> None:
        assert self.publish is not None
        if after is not None:
            with contextlib.suppress(Exception):  # its failure is the caller's to report, not a reason to lose usage
                await after()
        try:
            await self.publish(event)
        except Exception as exc:
            log.warning("model.usage %s not recorded: %r", event.id, exc)

    async def drain(self) -> None:
        """Wait for the usage events still being written (a clean stop)."""
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    def _response(self, cause: Cause, model: str, response: Any) -> None:
        usage = _get(response, "usage")
        status = _get(response, "status")
        if usage is None:
            log.warning("response %s of %s carried no usage", _get(response, "id"), cause.purpose)
            return
        self.record(
            cause, str(_get(response, "model") or model),
            usage_of(usage, web_search_calls=searches_in(response)),
            response_id=_get(response, "id"), failed=status == "failed",
        )

    # ---- the calls ---------------------------------------------------------------------------

    async def create(self, client: "AsyncOpenAI", cause: Cause, **kwargs: Any) -> "Response":
        """``client.responses.create`` (not streamed), metered."""
        response: Response = await client.responses.create(**kwargs)
        self._response(cause, str(kwargs.get("model") or ""), response)
        return response

    async def compact(self, client: "AsyncOpenAI", cause: Cause, **kwargs: Any) -> Any:
        """``client.responses.compact``, metered."""
        result = await client.responses.compact(**kwargs)
        usage = _get(result, "usage")
        if usage is not None:
            self.record(cause, str(kwargs.get("model") or ""), usage_of(usage), response_id=_get(result, "id"))
        return result

    async def stream(self, client: "AsyncOpenAI", cause: Cause, body: dict[str, Any], **post: Any) -> "MeteredStream":
        """A streamed ``POST /responses`` of events as the server sent them (``client.post``'s
        ``stream_cls`` and ``options`` in ``post``); its terminal event's usage is recorded."""
        stream = await client.post("/responses", body={**body, "stream": True}, cast_to=object, stream=True, **post)
        return MeteredStream(stream, self, cause, str(body.get("model") or ""))

    def realtime(self, client: "AsyncOpenAI", model: str) -> Any:
        """``client.realtime.connect``: the caller records each ``response.done`` with
        ``priced`` (a Realtime session bills per response, not per connection)."""
        return client.realtime.connect(model=model)


class MeteredStream:
    """The events of one streamed response, passed through untouched; the terminal one's usage
    is recorded as it goes by (after the last delta: nothing before the first one waits)."""

    def __init__(self, stream: Any, meter: Meter, cause: Cause, model: str) -> None:
        self.stream = stream
        self.meter = meter
        self.cause = cause
        self.model = model

    def __aiter__(self) -> AsyncIterator[object]:
        return self._events()

    async def _events(self) -> AsyncIterator[object]:
        async for event in self.stream:
            if isinstance(event, dict) and event.get("type") in TERMINAL:
                response = event.get("response")
                if isinstance(response, dict):
                    self.meter._response(self.cause, self.model, response)
            yield event

    async def close(self) -> None:
        await self.stream.close()
