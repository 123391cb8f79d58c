"""The one plain Responses call per-turn extraction makes: non-streaming, unchained, unstored."""

from delegate.runtime.openai_client import LazyOpenAI, ModelFailed

from .settings import Settings

__all__ = ["Model", "ModelFailed"]


class Model(LazyOpenAI):
    def __init__(self, settings: Settings) -> None:
        # The SDK's own retries are off: a retry is another model call for the same turn, and
        # the worker decides those. Without a key the index and search still work.
        super().__init__(timeout=settings.openai_timeout_seconds, max_retries=0,
                         without_key="per-turn extraction will wait (turns stay in the pending list)",
                         endpoint=settings.openai_client_options())
