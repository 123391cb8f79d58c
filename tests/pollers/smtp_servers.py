"""The outbox tests' SMTP server (aiosmtpd, ``SmtpCapture``) made as strict as a provider's
submission server where these tests need it:

- ``oauth``: AUTH required before MAIL, and XOAUTH2 the only mechanism (Outlook.com and
  Microsoft 365 take nothing else), the access token checked at the test's OAuth2 server. A
  refused token gets Gmail's answer: ``334 <base64 JSON error>``, then, after the client's
  empty line, ``535 5.7.8``.
- ``eight_bit_mime=False``: the server does not offer 8BITMIME.
- always: 8-bit message data without ``BODY=8BITMIME`` is refused (RFC 6152 §3: a client must
  not send it undeclared), and the MAIL parameters are kept in ``mail_options``.
"""

import base64
import json
import re
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, Session

from tests.pollers.outbox_fixtures import SmtpCapture
from tests.support.oauth_server import OAuthServer

GOOGLE_ERROR = json.dumps({"status": "400", "schemes": "Bearer", "scope": "https://mail.google.com/"})
_XOAUTH2 = re.compile(rb"^user=(.*?)\x01auth=[bB]earer (.*?)\x01\x01$")


class StrictSmtp(SmtpCapture):
    def __init__(self, *, oauth: OAuthServer | None = None, eight_bit_mime: bool = True) -> None:
        super().__init__()
        self.oauth, self.eight_bit_mime = oauth, eight_bit_mime
        self.mail_options: list[list[str]] = []
        self.auth_attempts: list[bool] = []
        kwargs: dict[str, Any] = {}
        if oauth is not None:  # plain text on 127.0.0.1 only: aiosmtpd warns about that, rightly elsewhere
            kwargs = {"auth_required": True, "auth_require_tls": False, "auth_exclude_mechanism": ["LOGIN", "PLAIN"]}
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port, **kwargs)

    async def handle_EHLO(
        self, server: SMTP, session: Session, envelope: Envelope, hostname: str, responses: list[str]
    ) -> list[str]:
        session.host_name = hostname
        return responses if self.eight_bit_mime else [r for r in responses if "8BITMIME" not in r.upper()]

    async def auth_XOAUTH2(self, server: SMTP, args: list[str]) -> AuthResult:
        if len(args) > 1:
            blob: object = base64.b64decode(args[1])
        else:
            blob = await server.challenge_auth("")
        match = _XOAUTH2.match(blob) if isinstance(blob, bytes) else None
        if match is None:
            return AuthResult(success=False, handled=False, message="501 5.5.2 Cannot decode response")
        user, token = (part.decode() for part in match.groups())
        assert self.oauth is not None
        ok = self.oauth.active(token, user)
        self.auth_attempts.append(ok)
        if ok:
            return AuthResult(success=True, auth_data=user)
        await server.challenge_auth(GOOGLE_ERROR)  # the client answers with an empty line
        return AuthResult(success=False, handled=False, message="535 5.7.8 Username and Password not accepted.")

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        options = [o.upper() for o in envelope.mail_options]
        self.mail_options.append(options)
        if any(b > 127 for b in envelope.original_content or b"") and "BODY=8BITMIME" not in options:
            return "554 5.6.0 8-bit message data without BODY=8BITMIME"
        return await super().handle_DATA(server, session, envelope)
