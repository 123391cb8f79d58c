"""The one plain Responses call per-turn extraction makes: non-streaming, unchained, unstored."""

import logging

import openai
from openai import AsyncOpenAI

from .settings import Settings

log = logging.getLogger(__name__)


class ModelFailed(Exception):
    """The call failed or ended unfinished; the turn stays pending and is retried."""


class Model:
    def __init__(self, settings: Settings) -> None:
        self.client: AsyncOpenAI | None
        self.missing = ""
        try:
            # The SDK reads OPENAI_API_KEY / OPENAI_BASE_URL itself. Its own retries are off:
            # a retry is another model call for the same turn, and the worker decides those.
            self.client = AsyncOpenAI(timeout=settings.openai_timeout_seconds, max_retries=0)
        except openai.OpenAIError as exc:
            # Without a key the index and search still work; turns wait in the pending list.
            self.client = None
            self.missing = str(exc)
            log.error("no OpenAI client (%s): per-turn extraction will wait", exc)

    async def complete(self, *, model: str, instructions: str, text: str) -> str:
        if self.client is None:
            raise ModelFailed(f"no OpenAI client: {self.missing}")
        try:
            response = await self.client.responses.create(
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
