"""The plain Responses calls the inner plane makes: never on the chat chain, nothing stored."""

import logging

import openai
from openai import AsyncOpenAI

from .settings import Settings

log = logging.getLogger(__name__)


class ModelFailed(Exception):
    """The model call failed or answered nothing usable; the caller retries later."""


class Model:
    def __init__(self, settings: Settings) -> None:
        self.client: AsyncOpenAI | None
        self.missing = ""
        try:
            # The SDK reads OPENAI_API_KEY / OPENAI_BASE_URL itself; its own retries cover short blips.
            self.client = AsyncOpenAI(timeout=settings.openai_timeout_seconds)
        except openai.OpenAIError as exc:
            # Without a key the service still follows the ledger and fires idle checks.
            self.client = None
            self.missing = str(exc)
            log.error("no OpenAI client (%s): capsule refresh and memory extraction will fail", exc)

    async def complete(self, *, model: str, instructions: str, text: str) -> str:
        """One non-streaming, unchained call: ``store=false``, no ``previous_response_id``."""
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
