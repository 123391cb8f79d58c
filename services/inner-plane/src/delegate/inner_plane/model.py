"""The plain Responses calls the inner plane makes: never on the chat chain, nothing stored."""

from delegate.runtime.openai_client import LazyOpenAI, ModelFailed

from .settings import Settings

__all__ = ["Model", "ModelFailed"]


class Model(LazyOpenAI):
    def __init__(self, settings: Settings) -> None:
        # The SDK's own retries cover short blips. Without a key the service still follows
        # the ledger and fires idle checks.
        super().__init__(timeout=settings.openai_timeout_seconds, max_retries=None,
                         without_key="capsule refresh and memory extraction will fail",
                         endpoint=settings.openai_client_options())
