"""OAuth2 for CalDAV (Google Calendar takes nothing else): bearer tokens from a refresh token,
fetched and refreshed by the mail's OAuth2 support (``mail_oauth.AccessTokens``: Authlib's
refresh_token grant, rotated refresh tokens kept under RUNTIME_DATA_DIR).

``caldav`` sends its requests from a worker thread; the token is asked of the event loop that
owns ``AccessTokens`` and waited for there, so one refresh serves every request.
"""

import asyncio
from typing import Any

from niquests.auth import AuthBase

from ..mail_oauth import GOOGLE, AccessTokens, Credentials
from ..settings import Settings

TOKEN_WAIT_S = 60.0


class BearerAuth(AuthBase):
    def __init__(self, tokens: AccessTokens, loop: asyncio.AbstractEventLoop) -> None:
        self.tokens, self.loop = tokens, loop

    def __call__(self, request: Any) -> Any:
        token = asyncio.run_coroutine_threadsafe(self.tokens.current(), self.loop).result(TOKEN_WAIT_S)
        request.headers["Authorization"] = f"Bearer {token}"
        return request


def caldav_auth(settings: Settings) -> BearerAuth | None:
    """Bearer tokens when CALDAV_OAUTH2_REFRESH_TOKEN is set (call from the event loop); None:
    the username and password log in."""
    refresh = settings.caldav_oauth2_refresh_token.strip()
    if not refresh:
        return None
    creds = Credentials(
        settings.caldav_oauth2_client_id.strip(), settings.caldav_oauth2_client_secret.strip(), refresh,
        settings.caldav_oauth2_token_url.strip() or GOOGLE,
        settings.caldav_oauth2_scope.strip() or "https://www.googleapis.com/auth/calendar",
    )
    tokens = AccessTokens(creds, settings.runtime_data_dir, settings.outbox_http_timeout_s)
    return BearerAuth(tokens, asyncio.get_running_loop())
