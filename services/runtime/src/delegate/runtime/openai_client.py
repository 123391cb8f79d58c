"""An OpenAI client made on first use: the SDK is never part of a service's start.

The inner plane, memory and tasks call the model now and then, not on every input, so the SDK
(about 500 modules, ~15 MB) loads with the first call, not at start. The agent calls it on every
turn, so it ``preload``s the SDK once it is ready to take input: imported with its code, the SDK
was about a quarter of the CPU a host (every service in one process) spent before its services were
ready. It loads in a thread: on the event loop, an import that takes a second on a busy machine
holds up everything else the service does meanwhile (lease renewals, the ledger follower, acks).
A missing key is still said at start.
"""

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from delegate.runtime import without_unused_extras

if TYPE_CHECKING:
    from openai import AsyncOpenAI

    from .metering import Cause, Meter

log = logging.getLogger(__name__)


class ModelFailed(Exception):
    """The call failed, or ended unfinished: the caller decides when it is tried again."""


class LazyOpenAI:
    def __init__(
        self, *, timeout: float, max_retries: int | None, without_key: str, endpoint: dict[str, Any] | None
    ) -> None:
        """``max_retries`` None keeps the SDK's own retries; ``without_key`` says what waits
        while OPENAI_API_KEY is unset (logged once, at start). ``endpoint``: the client's
        ``api_key`` and ``base_url`` (``ServiceSettings.openai_client_options``), given to the
        SDK explicitly; None when there is no key and no stand-in."""
        self.timeout = timeout
        self.max_retries = max_retries
        self.endpoint = endpoint
        self.client: AsyncOpenAI | None = None
        self._loading: asyncio.Future[None] | None = None
        self.missing = ""
        # What the SDK's constructor would refuse, said at start without loading the SDK.
        if endpoint is None:
            self.missing = "the OPENAI_API_KEY environment variable is not set"
            log.error("no OpenAI client (%s): %s", self.missing, without_key)

    def preload(self) -> None:
        """Start loading the SDK in a thread, without waiting for it: the first call then finds
        it loaded, or waits only for the rest of this same load."""
        if self._loading is None and not self.missing:
            self._loading = asyncio.ensure_future(asyncio.to_thread(import_sdk))

    async def get(self) -> "AsyncOpenAI":
        if self.missing:
            raise ModelFailed(f"no OpenAI client: {self.missing}")
        if self.client is None:
            self.preload()
            assert self._loading is not None
            await asyncio.shield(self._loading)  # a caller cancelled meanwhile leaves the load going
            from openai import DEFAULT_MAX_RETRIES, AsyncOpenAI

            if self.client is None:  # another caller may have made it while this one waited
                retries = DEFAULT_MAX_RETRIES if self.max_retries is None else self.max_retries
                self.client = AsyncOpenAI(timeout=self.timeout, max_retries=retries, **(self.endpoint or {}))
        return self.client

    async def complete(self, *, model: str, instructions: str, text: str, meter: "Meter", cause: "Cause") -> str:
        """One plain call: non-streaming, unchained (no ``previous_response_id``), ``store=false``;
        its usage recorded by ``meter`` as ``cause``'s."""
        client = await self.get()
        import openai

        try:
            response = await meter.create(
                client, cause, model=model, instructions=instructions, input=text, store=False
            )
        except openai.OpenAIError as exc:
            raise ModelFailed(f"{type(exc).__name__}: {exc}") from exc
        if response.status not in (None, "completed"):
            raise ModelFailed(f"response {response.id} ended {response.status}: {response.error}")
        return response.output_text

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()


def import_sdk() -> None:
    """Load the SDK (call it in a thread), without the parts nothing here uses."""
    with without_unused_extras():  # its aiohttp client and httpx's CLI are never used
        import openai  # noqa: F401
