"""pymap's in-memory IMAP server speaking XOAUTH2 as Gmail and Outlook do, run as a script:

    python -m tests.support.pymap_xoauth2 --host 127.0.0.1 --port N --no-tls \\
        xoauth2-dict --demo-user U --demo-password P --introspect-url URL

pymap's SASL layer (pysasl) has the XOAUTH2 mechanism; this adds what the providers do around
it and pymap does not:

- ``AUTH=XOAUTH2`` beside PLAIN/LOGIN, and SASL-IR (RFC 4959): the client may send its
  initial response with ``AUTHENTICATE XOAUTH2 <base64>`` (Gmail and Outlook advertise it,
  aioimaplib always sends it).
- the access token is checked at the authorization server (RFC 7662 introspection at
  ``--introspect-url``): live, and issued to the user named in the XOAUTH2 string.
- a refused token gets Google's error challenge (``+ <base64 JSON status 401>``); the
  server waits for the client's empty response, then answers ``NO [AUTHENTICATIONFAILED]``.
"""

import base64
import json
import urllib.request
from argparse import ArgumentParser, Namespace
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from pymap.backend import backends
from pymap.backend.dict import Config, DictBackend, Identity, Login
from pymap.context import current_command
from pymap.exceptions import InvalidAuth
from pymap.main import main
from pymap.parsing import EndLine, Params, Space
from pymap.parsing.command.nonauth import AuthenticateCommand
from pymap.parsing.commands import Commands
from pymap.parsing.primitives import Atom
from pysasl import SASLAuth
from pysasl.creds.external import ExternalCredentials
from pysasl.creds.server import ServerCredentials
from pysasl.exception import InvalidResponse
from pysasl.mechanism import ChallengeResponse, ServerChallenge
from pysasl.mechanism.oauth import OAuth2Mechanism

GOOGLE_ERROR = json.dumps({"status": "401", "schemes": "bearer", "scope": "https://mail.google.com/"}).encode()


class AuthenticateIR(AuthenticateCommand):
    """AUTHENTICATE with SASL-IR's optional initial response."""

    def __init__(self, tag: bytes, mech_name: bytes, initial: bytes | None) -> None:
        super().__init__(tag, mech_name)
        self.initial = initial

    @classmethod
    def parse(cls, buf: memoryview, params: Params) -> tuple["AuthenticateIR", memoryview]:
        _, buf = Space.parse(buf, params)
        atom, buf = Atom.parse(buf, params)
        initial: bytes | None = None
        try:
            _, after = Space.parse(buf, params)
        except Exception:
            after = None
        if after is not None:
            response, buf = Atom.parse(after, params)
            initial = b"" if response.value == b"=" else base64.b64decode(response.value)
        _, buf = EndLine.parse(buf, params)
        return cls(params.tag, atom.value.upper(), initial), buf


class Bearer(ExternalCredentials):
    def __init__(self, user: str, verified: bool) -> None:
        super().__init__(user, None)
        self.verified = verified


class XOAuth2(OAuth2Mechanism):
    def __init__(self, introspect_url: str) -> None:
        super().__init__(b"XOAUTH2")
        self.introspect_url = introspect_url

    def server_attempt(self, responses: Sequence[ChallengeResponse]) -> tuple[ExternalCredentials, None]:
        command = current_command.get(None)
        initial = getattr(command, "initial", None)
        sent = ([initial] if initial is not None else []) + [r.response for r in responses]
        if not sent:
            raise ServerChallenge(b"")
        match = self._pattern.match(sent[0])
        if match is None:
            raise InvalidResponse()
        user, token = (part.decode() for part in match.groups())
        if len(sent) > 1:  # the client's empty answer to the error challenge: the refusal ends it
            return Bearer(user, False), None
        if self._active(user, token):
            return Bearer(user, True), None
        raise ServerChallenge(GOOGLE_ERROR)  # the client answers with an empty line

    def _active(self, user: str, token: str) -> bool:
        request = urllib.request.Request(
            self.introspect_url, data=urlencode({"token": token}).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            found = json.loads(answer.read())
        return bool(found.get("active")) and found.get("username") == user


class XConfig(Config):
    def __init__(self, args: Namespace, *, introspect_url: str, **extra: Any) -> None:
        super().__init__(args, **extra)
        self.introspect_url = introspect_url

    @classmethod
    def parse_args(cls, args: Namespace) -> dict[str, Any]:
        return {**super().parse_args(args), "introspect_url": args.introspect_url}

    @property
    def commands(self) -> Commands:
        commands = Commands()
        commands.register(AuthenticateIR)
        return commands

    @property
    def initial_capability(self) -> Sequence[bytes]:
        return [*super().initial_capability, b"SASL-IR"]

    @property
    def tls_auth(self) -> SASLAuth:
        return SASLAuth([*SASLAuth.defaults().server_mechanisms, XOAuth2(self.introspect_url)])


class XLogin(Login):
    async def authenticate(self, credentials: ServerCredentials) -> Identity:
        if isinstance(credentials, Bearer):
            if not credentials.verified:
                raise InvalidAuth()
            return Identity(credentials.authzid, self, None, frozenset())
        return await super().authenticate(credentials)


class XBackend(DictBackend):
    @classmethod
    def add_subparser(cls, name: str, subparsers: Any) -> ArgumentParser:
        parser = super().add_subparser(name, subparsers)
        parser.add_argument("--introspect-url", required=True, help="RFC 7662 token introspection")
        return parser

    @classmethod
    async def init(cls, args: Namespace, **overrides: Any) -> tuple[DictBackend, Config]:
        config = XConfig.from_args(args, **overrides)
        login = XLogin(config)
        await cls._add_demo_user(config, login)
        return cls(login, config), config


if __name__ == "__main__":
    backends.add("xoauth2-dict", XBackend)
    main()
