"""The official Twilio REST client, pointed at TWILIO_API_BASE_URL when set (a local stand-in).

Shared by the services that call Twilio's REST API (the pollers' SMS outbox, the voice
service's outbound calls). The SDK's synchronous client, called from a worker thread
(``asyncio.to_thread``): its URL-rewriting hook below is the one shape that reaches a local
stand-in for every Twilio domain, and the async client would add aiohttp as a second HTTP stack
for a few short, timeout-bounded requests.

twilio is not a dependency of the runtime: only the services that import this module install
it (tests/runtime/test_optional_vendors.py checks both sides).
"""

from typing import Any
from urllib.parse import urlsplit, urlunsplit

from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response
from twilio.rest import Client


class BaseUrlTwilioHttpClient(TwilioHttpClient):  # type: ignore[misc]  # twilio is untyped
    """Sends every request to ``base_url``'s scheme and host. It runs after the client's own
    region/edge host rewriting, so it works for every Twilio domain and is immune to that
    rewriting mangling a local host (twilio-email-wire.md, section 4)."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._base = urlsplit(base_url)

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Response:
        parts = urlsplit(url)
        url = urlunsplit((self._base.scheme, self._base.netloc, parts.path, parts.query, ""))
        return super().request(method, url, *args, **kwargs)


def twilio_rest_client(account_sid: str, auth_token: str, *, base_url: str | None, timeout: float) -> Client:
    """A client for the account whose every request is bounded by ``timeout`` seconds."""
    http_client = BaseUrlTwilioHttpClient(base_url, timeout=timeout) if base_url else TwilioHttpClient(timeout=timeout)
    return Client(account_sid, auth_token, http_client=http_client)
