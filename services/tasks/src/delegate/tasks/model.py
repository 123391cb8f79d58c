"""One model step of a task: a Responses call on the task's own chain.

Each task has its own chain (``previous_response_id``), never the owner's conversation chain,
and stored responses, so a runner that restarts continues the chain from the journaled head
instead of sending the whole history again.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from delegate.runtime import without_unused_extras

from .journal import Call
from .prompts import INSTRUCTIONS
from .settings import Settings

if TYPE_CHECKING:  # the SDK (about 500 modules) loads with the first step, not at start
    from openai import AsyncOpenAI

log = logging.getLogger(__name__)


class ModelFailed(Exception):
    """The call failed or ended unfinished; the runner retries it (it was not a completed step)."""


@dataclass
class Answer:
    response_id: str
    calls: list[Call] = field(default_factory=list)
    text: str = ""
    tokens: int = 0


class Model:
    def __init__(self, settings: Settings) -> None:
        self.model = settings.model_name
        self.timeout = settings.openai_timeout_seconds
        self.client: AsyncOpenAI | None = None
        self.missing = ""
        # What the SDK's constructor refuses (it reads OPENAI_API_KEY / OPENAI_BASE_URL
        # itself), checked here so a missing key is still said at start, without loading it.
        if os.environ.get("OPENAI_API_KEY") is None:
            self.missing = "the OPENAI_API_KEY environment variable is not set"
            log.error("no OpenAI client (%s): tasks wait", self.missing)

    def _client(self) -> "AsyncOpenAI":
        if self.client is None:
            with without_unused_extras():  # its aiohttp client and httpx's CLI are never used
                from openai import AsyncOpenAI

            # The SDK's own retries are off: the runner decides when a step is tried again.
            self.client = AsyncOpenAI(timeout=self.timeout, max_retries=0)
        return self.client

    async def step(self, *, input_items: list[dict[str, Any]], previous: str | None,
                   tools: list[dict[str, Any]]) -> Answer:
        if self.missing:
            raise ModelFailed(f"no OpenAI client: {self.missing}")
        import openai

        try:
            response = await self._client().responses.create(
                model=self.model, instructions=INSTRUCTIONS, input=input_items,  # type: ignore[arg-type]
                previous_response_id=previous, tools=tools or openai.omit,  # type: ignore[arg-type]
                store=True, parallel_tool_calls=False,
            )
        except openai.OpenAIError as exc:
            raise ModelFailed(f"{type(exc).__name__}: {exc}") from exc
        if response.status not in (None, "completed"):
            raise ModelFailed(f"response {response.id} ended {response.status}: {response.error}")
        calls = [
            Call(item.call_id, item.name, item.arguments)
            for item in response.output
            if item.type == "function_call"
        ]
        usage = response.usage
        tokens = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
        return Answer(response.id, calls, response.output_text, tokens)

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
