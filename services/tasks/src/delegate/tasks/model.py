"""One model step of a task: a Responses call on the task's own chain.

Each task has its own chain (``previous_response_id``), never the owner's conversation chain,
and stored responses, so a runner that restarts continues the chain from the journaled head
instead of sending the whole history again.
"""

from dataclasses import dataclass, field
from typing import Any

from delegate.runtime.metering import Cause, Meter
from delegate.runtime.openai_client import LazyOpenAI, ModelFailed

from .journal import FunctionCall
from .prompts import INSTRUCTIONS
from .settings import Settings

__all__ = ["Answer", "Model", "ModelFailed"]


@dataclass
class Answer:
    response_id: str
    calls: list[FunctionCall] = field(default_factory=list)
    text: str = ""
    tokens: int = 0


class Model(LazyOpenAI):
    def __init__(self, settings: Settings) -> None:
        # The SDK's own retries are off: the runner decides when a step is tried again.
        super().__init__(timeout=settings.openai_timeout_seconds, max_retries=0, without_key="tasks wait",
                         endpoint=settings.openai_client_options())
        self.model = settings.model_name

    async def step(self, *, input_items: list[dict[str, Any]], previous: str | None,
                   tools: list[dict[str, Any]], meter: Meter, cause: Cause) -> Answer:
        client = await self.get()
        import openai

        try:
            response = await meter.create(
                client, cause, model=self.model, instructions=INSTRUCTIONS, input=input_items,
                previous_response_id=previous, tools=tools or openai.omit,
                store=True, parallel_tool_calls=False,
            )
        except openai.OpenAIError as exc:
            raise ModelFailed(f"{type(exc).__name__}: {exc}") from exc
        if response.status not in (None, "completed"):
            raise ModelFailed(f"response {response.id} ended {response.status}: {response.error}")
        calls = [
            FunctionCall(item.call_id, item.name, item.arguments)
            for item in response.output
            if item.type == "function_call"
        ]
        usage = response.usage
        tokens = (usage.input_tokens + usage.output_tokens) if usage is not None else 0
        return Answer(response.id, calls, response.output_text, tokens)
