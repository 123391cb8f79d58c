"""The Twilio REST client the outbox sends SMS with (``delegate.runtime.twilio_rest``)."""

from typing import TYPE_CHECKING

from .settings import Settings

if TYPE_CHECKING:
    from twilio.rest import Client


def twilio_client(settings: Settings) -> "Client":
    """A client for the configured account; every request is bounded by OUTBOX_HTTP_TIMEOUT_S.
    The SDK loads here, when SMS is configured, not at the start of every pollers process."""
    from delegate.runtime.twilio_rest import twilio_rest_client

    return twilio_rest_client(
        settings.twilio_account_sid or "",
        settings.twilio_auth_token or "",
        base_url=settings.twilio_api_base_url,
        timeout=settings.outbox_http_timeout_s,
    )
