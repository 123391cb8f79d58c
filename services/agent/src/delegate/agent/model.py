"""One Responses API call at a time, streamed, with failures sorted into what the turn can do.

- ``ModelError``: the call failed before producing anything usable and retrying now will not
  help (the SDK already retried 429/5xx/timeouts ``max_retries`` times). The turn fails.
- ``ChainLost``: the server no longer knows our ``previous_response_id`` (or refuses the
  replacement input). The turn can start a fresh working context instead.
- ``Rejected``: any other HTTP 400. Fatal for the turn, unless the request replayed a
  compaction's replacement input: then the turn starts a fresh working context too.
- ``StreamBroken``: the stream started and then broke (dropped connection, silence past the
  timeout, ``response.failed``, an in-stream ``error`` event in either shape). Sending the
  same request again is safe: a failed response never becomes the chain head.

Events are the server's JSON objects as sent (see ``stream_response``), dispatched on their ``type``.

The client is a ``LazyOpenAI``: the SDK loads in a thread once the agent leads (``preload``), not
with this module, so a host's services are ready without it; a call made before that load ends
waits for the rest of it.
"""

import logging
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from delegate.runtime.metering import Cause, Meter
from delegate.runtime.openai_client import LazyOpenAI, ModelFailed

if TYPE_CHECKING:
    import openai
    from openai import AsyncOpenAI, RequestOptions

log = logging.getLogger(__name__)

# In-stream failure codes that a second attempt cannot fix.
FINAL_STREAM_CODES = frozenset({"invalid_prompt", "content_filter", "invalid_request_error", "context_length_exceeded"})
QUOTA_CODES = frozenset({"insufficient_quota", "credit_balance_exhausted", "project_spend_limit_exceeded"})
CHAIN_CODES = frozenset({"previous_response_not_found", "invalid_encrypted_content"})


class ModelError(Exception):
    """A failure the user is told about: ``code`` is stable, ``message`` is for people."""

    def __init__(self, code: str, message: str, *, retryable: bool = False, detail: str = "") -> None:
        super().__init__(f"{code}: {message}" + (f" ({detail})" if detail else ""))
        self.code = code
        self.message = message
        self.retryable = retryable
        self.detail = detail


class ChainLost(ModelError):
    pass


class Rejected(ModelError):
    """HTTP 400: the server refused the request as sent. Sending it again cannot help; sending
    another context can, when it was the context that was refused (``turn._converse``)."""


class StreamBroken(ModelError):
    def __init__(self, code: str, message: str, *, final: bool = False, detail: str = "") -> None:
        super().__init__(code, message, retryable=True, detail=detail)
        self.final = final


@dataclass(frozen=True)
class FunctionCall:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0


@dataclass
class ModelResult:
    response_id: str
    status: str
    text: str
    calls: list[FunctionCall] = field(default_factory=list)
    compactions: int = 0
    usage: TokenUsage | None = None


DeltaSink = Callable[[str], Awaitable[None]]
FlagSink = Callable[[bool], Awaitable[None]]

BEARER: "RequestOptions" = {"security": {"bearer_auth": True}}


async def sdk_client(client: LazyOpenAI) -> "AsyncOpenAI":
    """The SDK's client, once loaded; without a model endpoint configured, a ``ModelError``."""
    try:
        return await client.get()
    except ModelFailed as exc:
        raise ModelError("model_unconfigured", "No model is configured (OPENAI_API_KEY is not set).") from exc


async def stream_response(
    client: LazyOpenAI,
    request: dict[str, Any],
    *,
    on_delta: DeltaSink,
    on_compacting: FlagSink | None = None,
    on_created: Callable[[str], None] | None = None,
    meter: Meter,
    cause: Cause,
) -> ModelResult:
    """Run one streamed ``POST /responses`` to its terminal event (its usage metered as ``cause``'s)."""
    sdk = await sdk_client(client)
    import openai  # loaded by now: what ``sdk_client`` waited for
    from openai import AsyncStream

    with _request_errors(
        timeout="The model took too long to answer. Please try again.",
        unreachable="The model service could not be reached. Please try again.",
    ):
        # Events arrive as the plain JSON objects the server sent. ``responses.create`` would
        # run our already wire-shaped request through the SDK's typed-params transform and build
        # a pydantic model of every event, the echoed tools and instructions included: together
        # most of a turn's CPU before its first delta. ``client.post`` keeps everything else of
        # the SDK (auth, retries before the first byte, timeouts, status errors, SSE framing,
        # raising on an in-stream ``error`` object) and hands the events over untouched.
        stream = await meter.stream(sdk, cause, request, stream_cls=AsyncStream[object], options=BEARER)
    final: Any = None
    try:
        async for event in stream:
            if not isinstance(event, dict):
                continue
            kind = event.get("type")
            if kind == "response.output_text.delta":
                if event.get("delta"):
                    await on_delta(str(event["delta"]))
            elif kind == "response.created":
                response_id = _get(event.get("response"), "id")
                if on_created and isinstance(response_id, str):
                    on_created(response_id)
            elif kind in ("response.output_item.added", "response.output_item.done"):
                if on_compacting and _get(event.get("item"), "type") == "compaction":
                    await on_compacting(kind.endswith("added"))
            elif kind in ("response.completed", "response.incomplete"):
                final = event.get("response")
                if not isinstance(final, dict):
                    raise _broken(None, f"{kind} carried no response object")
            elif kind == "response.failed":
                error = _get(event.get("response"), "error")
                raise _broken(_get(error, "code"), _get(error, "message"))
            elif kind == "error":
                raise _broken(event.get("code"), event.get("message"))
    except ModelError:
        raise
    except openai.APITimeoutError as exc:
        raise StreamBroken("stream_timeout", "The model went silent while answering.", detail=repr(exc)) from exc
    except openai.APIConnectionError as exc:
        raise StreamBroken(
            "stream_dropped", "The connection to the model broke while it was answering.", detail=repr(exc)
        ) from exc
    except openai.APIError as exc:  # an in-stream error event with a top-level "error" object
        raise _broken(getattr(exc, "code", None), str(exc.message)) from exc
    except Exception as exc:  # dropped connection, read timeout, garbage on the wire
        raise StreamBroken(
            "stream_dropped", "The connection to the model broke while it was answering.", detail=repr(exc)
        ) from exc
    finally:
        try:
            await stream.close()
        except Exception as exc:
            log.debug("closing the stream: %r", exc)
    if final is None:
        raise StreamBroken("stream_dropped", "The model's answer stream ended before it was complete.")
    return parse_response(final)


def _get(obj: Any, key: str) -> Any:
    """A field of a wire object, or None when the object is missing or not an object."""
    return obj.get(key) if isinstance(obj, dict) else None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def parse_response(response: dict[str, Any]) -> ModelResult:
    """A final Response object, as sent on the wire."""
    texts: list[str] = []
    calls: list[FunctionCall] = []
    compactions = 0
    for item in _list(response.get("output")):
        kind = _get(item, "type")
        if kind == "message" and (item.get("role") or "assistant") == "assistant":
            for part in _list(item.get("content")):
                part_type = _get(part, "type")
                if part_type == "output_text":
                    texts.append(str(part.get("text") or ""))
                elif part_type == "refusal":
                    texts.append(str(part.get("refusal") or ""))
        elif kind == "function_call":
            calls.append(FunctionCall(str(item["call_id"]), str(item["name"]), str(item.get("arguments") or "{}")))
        elif kind == "compaction":
            compactions += 1
    return ModelResult(
        response_id=str(response.get("id") or ""),
        status=str(response.get("status") or "completed"),
        text="".join(texts),
        calls=calls,
        compactions=compactions,
        usage=parse_usage(response.get("usage")),
    )


def parse_usage(usage: Any) -> TokenUsage | None:
    """Usage from a wire object (dict) or an SDK model (the compaction endpoint returns one)."""
    if usage is None:
        return None
    if not isinstance(usage, dict):
        usage = usage.to_dict(mode="json") if hasattr(usage, "to_dict") else {}
    details = usage.get("input_tokens_details")
    return TokenUsage(
        input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0),
        total_tokens=int(usage.get("total_tokens") or 0),
        cached_tokens=int(_get(details, "cached_tokens") or 0),
    )


@contextmanager
def _request_errors(*, timeout: str, unreachable: str) -> Iterator[None]:
    """A model request's SDK errors (before its first byte) as ``ModelError``, with these messages."""
    import openai  # loaded by now: the request ran on the client ``sdk_client`` waited for

    try:
        yield
    except openai.APIStatusError as exc:
        raise classify_status(exc) from exc
    except openai.APITimeoutError as exc:
        raise ModelError("model_timeout", timeout) from exc
    except openai.APIConnectionError as exc:
        raise ModelError("model_unreachable", unreachable) from exc


def classify_status(exc: "openai.APIStatusError") -> ModelError:
    """An HTTP error the SDK gave up on, as something a person can read."""
    status = exc.status_code
    code = str(getattr(exc, "code", None) or "")
    err_type = str(getattr(exc, "type", None) or "")
    detail = f"HTTP {status} {code or err_type}: {exc.message}"
    if code in CHAIN_CODES:
        return ChainLost(code, "The model no longer has this conversation's context.", detail=detail)
    if status == 429:
        if err_type == "insufficient_quota" or code in QUOTA_CODES:
            return ModelError("quota_exceeded", "The model account is out of quota.", detail=detail)
        return ModelError(
            "rate_limited", "The model service is busy (rate limited). Please try again in a moment.",
            retryable=True, detail=detail,
        )
    if status >= 500:
        return ModelError(
            "model_unavailable", "The model service had an error. Please try again.", retryable=True, detail=detail
        )
    if status in (401, 403):
        return ModelError("model_auth", "The model service refused our credentials.", detail=detail)
    if status == 404:
        return ModelError("model_not_found", "The configured model is not available.", detail=detail)
    rejected = Rejected if status == 400 else ModelError
    return rejected("model_rejected", f"The model service rejected the request: {exc.message}", detail=detail)


def _broken(code: str | None, message: str | None) -> StreamBroken:
    code = code or "server_error"
    text = "The model failed while answering."
    return StreamBroken(f"stream_{code}", text, final=code in FINAL_STREAM_CODES, detail=message or "")


async def compact(
    client: LazyOpenAI,
    *,
    model: str,
    instructions: str,
    previous_response_id: str | None = None,
    input_items: list[dict[str, Any]] | None = None,
    meter: Meter,
    cause: Cause,
) -> tuple[list[dict[str, Any]], TokenUsage | None]:
    """The standalone compaction endpoint: the replacement input for the next turn, and its usage."""
    kwargs: dict[str, Any] = {"model": model, "instructions": instructions}
    if previous_response_id:
        kwargs["previous_response_id"] = previous_response_id
    else:
        kwargs["input"] = input_items or []
    sdk = await sdk_client(client)
    with _request_errors(timeout="Compaction took too long.", unreachable="The model service could not be reached."):
        result = await meter.compact(sdk, cause, **kwargs)
    # Plain dicts, as returned: the SDK types user messages loosely (openai-wire.md 6.4).
    items = [_as_input_item(item) for item in result.output or []]
    return items, parse_usage(getattr(result, "usage", None))


def _as_input_item(item: Any) -> dict[str, Any]:
    if isinstance(item, dict):
        return item
    return dict(item.to_dict(mode="json", exclude_none=True))
