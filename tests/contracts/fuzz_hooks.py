"""Schemathesis checks for the gateway fuzz run (loaded through SCHEMATHESIS_HOOKS by fuzz_gateway).

``gateway_not_a_server_error``: no 5xx, except a documented 503 ``*_unavailable`` from a route
whose service the fuzz stack does not run (tasks: a fuzzed goal would start real browsing).
Twilio's webhooks are signed as Twilio signs them (``FUZZ_TWILIO_AUTH_TOKEN`` over
``FUZZ_PUBLIC_BASE_URL`` + the path and the form as sent), so their fuzzed forms get past the
signature to the handlers; the form's values are sent as text, as Twilio sends them.
``nothing_written_on_4xx``: a refused request wrote nothing. Every write the gateway can make
is a JetStream publish on a subject its NATS role grants (``contracts.roles``) or a put in its
sessions bucket; this module counts them with a plain subscription on the stack's NATS, and the
gateway answers only after JetStream acknowledged a publish, so after one flush every write the
request caused has been counted. A refusal's own record is not a write of what was refused:
``inbound.refused``, and the ``import.started``/``import.finished`` pair of an import refused
with nothing imported (``events: 0``; the refused import's status page and timeline row read it).
"""

import asyncio
import json
import os
import threading
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlencode

import nats
import schemathesis
from schemathesis.core import NotSet
from twilio.request_validator import RequestValidator

from delegate.contracts import topics
from delegate.contracts.roles import ROLES
from delegate.contracts.subjects import GATEWAY_SESSIONS_BUCKET
from delegate.gateway.errors import ApiError
from delegate.gateway.signals_api import SOURCE as SIGNAL_SOURCE
from delegate.gateway.twilio_signature import SIGNATURE_HEADER, parse_form

# Services the fuzz stack leaves out: their routes answer 503 with these codes.
ABSENT = frozenset({"tasks_unavailable"})
IMPORT_RECORDS = ("import.started", "import.finished")


class WriteCounter:
    def __init__(self, url: str) -> None:
        self.count = 0
        self.before = 0
        self.subjects: list[str] = []  # of every write counted, for the failure's message
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.nc: Any = self._run(self._connect(url))

    def _run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    async def _connect(self, url: str) -> Any:
        nc = await nats.connect(url, name="fuzz-write-counter")
        subjects = [t.subject for t in ROLES["gateway"].publishes] + [f"$KV.{GATEWAY_SESSIONS_BUCKET}.>"]
        for subject in subjects:
            await nc.subscribe(subject, cb=self._seen)
        await nc.flush()
        return nc

    async def _seen(self, msg: Any) -> None:
        if not by_gateway(msg.subject, msg.data) or refusal_record(msg.data):
            return
        self.count += 1
        self.subjects.append(msg.subject)

    def settled(self) -> int:
        self._run(self.nc.flush())
        return self.count


def by_gateway(subject: str, data: bytes) -> bool:
    """Whether the gateway wrote it: other roles publish on two of its subjects too (the inner
    plane wakes the agent, pollers pass mail on, services raise signals)."""
    if subject not in (topics.AGENT_INPUT.subject, topics.INNER_SIGNAL.subject):
        return True
    try:
        body = json.loads(data)
    except ValueError:
        return True
    if not isinstance(body, dict):
        return True
    if subject == topics.INNER_SIGNAL.subject:
        return body.get("source") == SIGNAL_SOURCE
    return body.get("type") == "regenerate" or (body.get("type") == "message" and body.get("channel") != "email")


def refusal_record(data: bytes) -> bool:
    try:
        event = json.loads(data)
    except ValueError:
        return False
    if not isinstance(event, dict) or not isinstance(event.get("payload"), dict):
        return False
    kind = event.get("kind")
    return kind == "inbound.refused" or (kind in IMPORT_RECORDS and event["payload"].get("events") == 0)


COUNTER = WriteCounter(os.environ["FUZZ_NATS_URL"])


def sign_as_twilio(case: Any) -> None:
    """A Twilio webhook (a form POST outside /api) with the signature Twilio would send."""
    token, public = os.environ.get("FUZZ_TWILIO_AUTH_TOKEN"), os.environ.get("FUZZ_PUBLIC_BASE_URL")
    if not token or not public or case.method.upper() != "POST" or case.path.startswith("/api/"):
        return
    if isinstance(case.body, NotSet):
        encoded = ""  # no body: an empty form, signed as such
    elif isinstance(case.body, Mapping):
        encoded = urlencode([(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in case.body.items()])
        case.body = encoded
    else:
        return  # not a form at all: refused before its signature matters
    try:
        form = parse_form(encoded.encode())
    except ApiError:
        return
    url = public.rstrip("/") + case.formatted_path
    case.headers[SIGNATURE_HEADER] = RequestValidator(token).compute_signature(url, form)


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: dict[str, Any]) -> None:
    sign_as_twilio(case)
    COUNTER.before = COUNTER.settled()


def _error_code(response: Any) -> str:
    try:
        body = json.loads(response.content)
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("code", "")) if isinstance(error, dict) else ""


@schemathesis.check
def gateway_not_a_server_error(ctx: Any, response: Any, case: Any) -> bool | None:
    if response.status_code < 500:
        return None
    if response.status_code == 503 and _error_code(response) in ABSENT:
        return None
    raise AssertionError(f"{response.status_code} from {case.method} {case.path}: {response.content[:500]!r}")


@schemathesis.check
def nothing_written_on_4xx(ctx: Any, response: Any, case: Any) -> bool | None:
    if not 400 <= response.status_code < 500:
        return None
    written = COUNTER.settled() - COUNTER.before
    if written:
        raise AssertionError(
            f"{response.status_code} from {case.method} {case.path}, yet the gateway wrote {written} message(s) "
            f"on {sorted(set(COUNTER.subjects[-written:]))}"
        )
    return None
