"""The one plain Responses call per-turn extraction makes: non-streaming, unchained, unstored."""

import logging
import os
from typing import TYPE_CHECKING

from delegate.runtime import without_unused_extras

from .settings import Settings

if TYPE_CHECKING:  # the SDK (about 500 modules) loads on the first call, not at start
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)


class ModelFailed(Exception):
    """The call failed or ended unfinished; the turn stays pending and is retried."""


class Model:
    def __init__(self, settings: Settings) -> None:
        self.timeout = settings.openai_timeout_seconds
        self.client: AsyncOpenAI | None = None
        self.missing = ""
        # What the SDK's constructor refuses (it reads OPENAI_API_KEY / OPENAI_BASE_URL
        # itself), checked here so a missing key is still said at start, without loading it.
        if os.environ.get("OPENAI_API_KEY") is None:
            # Without a key the index and search still work; turns wait in the pending list.
            self.missing = "the OPENAI_API_KEY environment variable is not set"
            log.error("no OpenAI client (%s): per-turn extraction will wait", self.missing)

    def _client(self) -> "AsyncOpenAI":
        if self.client is None:
            with without_unused_extras():  # its aiohttp client and httpx's CLI are never used
                from openai import AsyncOpenAI

            # The SDK reads OPENAI_API_KEY / OPENAI_BASE_URL itself. Its own retries are off:
            # a retry is another model call for the same turn, and the worker decides those.
            self.client = AsyncOpenAI(timeout=self.timeout, max_retries=0)
        return self.client

    async def complete(self, *, model: str, instructions: str, text: str) -> str:
        if self.missing:
            raise ModelFailed(f"no OpenAI client: {self.missing}")
        import openai

        try:
            response = await self._client().responses.create(
                model=model, instructions=instructions, input=text, store=False
            )
        except openai.OpenAIError as exc:
            raise ModelFailed(f"{type(exc).__name__}: {exc}") from exc
        if response.status not in (None, "completed"):
            raise ModelFailed(f"response {response.id} ended {response.status}: {response.error}")
        return response.output_text

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
