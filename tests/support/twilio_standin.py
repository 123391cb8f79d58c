"""A local stand-in for the parts of Twilio's REST API Delegate uses, speaking its real shapes
(twilio-email-wire.md §2.3, §2.4): sending and listing Messages, MMS media downloads, and
signed status callbacks back to the gateway. A real HTTP server on 127.0.0.1 that the
official SDK talks to unchanged through TWILIO_API_BASE_URL.

    tw = TwilioStandin().start()
    env = tw.env(owner_phone="+15550001111")     # TWILIO_* for a service under test
    tw.fail_next(1, status=500)                   # the next create answers 500
    tw.delay_next(3.0)                            # the next create is stored, answered 3 s late
    ... the service sends ...
    tw.messages                                   # every Message resource created, oldest first
    tw.bodies(to="+15550001111")                  # their bodies
    tw.requests                                   # every request, as received
    url = tw.add_media("cat.jpg", b"...", "image/jpeg", redirect=True)
    tw.send_status(gateway_url, sid, "delivered") # a signed callback to the StatusCallback
    tw.stop()

Endpoints (all need HTTP Basic ``AccountSid:AuthToken``, else 401 with Twilio's error JSON):

- ``POST /2010-04-01/Accounts/{sid}/Messages.json``: form fields To, From, Body, MediaUrl
  (repeated), StatusCallback, SmartEncoded; 201 + the Message resource. Missing To/From/Body, a
  Body over 1600 characters, or a parameter Twilio's API definition does not have
  (``MESSAGE_PARAMS``) is a 400 with Twilio's error code, as the real API answers.
  ``SmartEncoded=true`` replaces the characters that have a GSM-7 lookalike (curly quotes,
  dashes, ellipsis, odd spaces) when that leaves the body all GSM-7, and stores the replaced
  body: whether Twilio's resource shows the original or the replaced text is not documented,
  and this is the harder case for a sender that finds its earlier sends by their body.
- ``GET /2010-04-01/Accounts/{sid}/Messages.json``: newest first, filters To, From, DateSent,
  DateSent<, DateSent> (messages not yet sent have no date_sent and match no date filter),
  paged with PageSize/Page in Twilio's page shape.
- ``GET /2010-04-01/Accounts/{sid}/Messages/{MessageSid}.json``: one resource, or 404.
- ``POST /2010-04-01/Accounts/{sid}/Calls.json``: the parameters of Twilio's API definition
  (``CALL_PARAMS``; any other is a 400 here), To, From, Twiml or Url, StatusCallback with its
  StatusCallbackEvent list, Timeout (1-600), MachineDetection (Enable, DetectMessageEnd) with
  AsyncAmd and AsyncAmdStatusCallback; 201 + a Call resource (``CA…``, status ``queued``).
  Missing To/From, neither Twiml nor Url, or a value out of its range is a 400.
  ``calls`` lists them, oldest first.
- ``POST /2010-04-01/Accounts/{sid}/Calls/{CallSid}.json``: Status=completed|canceled ends the
  call (its ``completed`` status callback follows), Twiml/Url are recorded (``call_updates``).

A placed call goes on as the test drives it, with Twilio's signed callbacks delivered to the
gateway given to ``callbacks_to`` (signed over the public URL the call was created with):

    tw.callbacks_to(gateway_url)
    tw.ring(sid, answer_after=5.0)   # initiated, ringing, then in-progress after 5 s (blocking);
                                     # past Timeout (+5 s) it is no-answer instead
    tw.answered_by(sid, "machine_end_beep")  # the async AMD verdict (AnsweredBy, signed)
    tw.end_call(sid)                 # the far end hangs up: completed

Status callbacks carry Twilio's parameters (CallSid, CallStatus, CallbackSource
``call-progress-events``, SequenceNumber, Timestamp, CallDuration when completed, AnsweredBy once
known) and only for the StatusCallbackEvent values the call asked for (``completed`` alone when
it asked for none), as Twilio sends them.
- ``GET /media/{name}``: a file added with ``add_media``; with ``redirect=True`` it answers
  302 to ``http://localhost:{port}/cdn/{name}``, a different host name for the same server,
  which needs no auth, as Twilio's media CDN; ``cdn_auth_seen`` lists any Authorization
  header that still arrived there (a client must drop it on the other host).
"""

import base64
import email.utils
import json
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from .twilio_sign import twilio_signature

API = "/2010-04-01"
ERRORS = "https://www.twilio.com/docs/errors/"

# The Messages create parameters of Twilio's API definition (twilio_api_v2010, POST Messages.json).
MESSAGE_PARAMS = frozenset({
    "To", "StatusCallback", "ApplicationSid", "MaxPrice", "ProvideFeedback", "Attempt", "ValidityPeriod",
    "ForceDelivery", "ContentRetention", "AddressRetention", "SmartEncoded", "PersistentAction", "TrafficType",
    "ShortenUrls", "ScheduleType", "SendAt", "SendAsMms", "ContentVariables", "RiskCheck", "From",
    "MessagingServiceSid", "FallbackFrom", "Body", "MediaUrl", "ContentSid",
})
# SmartEncoded: Unicode characters with a GSM-7 lookalike, replaced when nothing else in the body
# needs Unicode (a body with an emoji goes as it is).
SMART_ENCODING = str.maketrans({
    "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
    "\u2013": "-", "\u2014": "-", "\u2026": "...", "\u00a0": " ", "\u2009": " ", "\u202f": " ",
})
GSM7 = frozenset(
    "@£$¥èéùìòÇ\nØø\rÅåΔ_ΦΓΛΩΠΨΣΘΞÆæßÉ !\"#¤%&'()*+,-./0123456789:;<=>?¡ABCDEFGHIJKLMNOPQRSTUVWXYZÄÖÑÜ§¿"
    "abcdefghijklmnopqrstuvwxyzäöñüà^{}\\[~]|€"
)


def smart_encoded(body: str) -> str:
    replaced = body.translate(SMART_ENCODING)
    return replaced if set(replaced) <= GSM7 else body

# The Calls create parameters of Twilio's API definition (twilio_api_v2010, POST Calls.json).
CALL_PARAMS = frozenset({
    "To", "From", "Method", "FallbackUrl", "FallbackMethod", "StatusCallback", "StatusCallbackEvent",
    "StatusCallbackMethod", "SendDigits", "Timeout", "Record", "RecordingChannels", "RecordingStatusCallback",
    "RecordingStatusCallbackMethod", "SipAuthUsername", "SipAuthPassword", "MachineDetection",
    "MachineDetectionTimeout", "RecordingStatusCallbackEvent", "Trim", "CallerId",
    "MachineDetectionSpeechThreshold", "MachineDetectionSpeechEndThreshold", "MachineDetectionSilenceTimeout",
    "AsyncAmd", "AsyncAmdStatusCallback", "AsyncAmdStatusCallbackMethod", "Byoc", "CallReason", "CallToken",
    "RecordingTrack", "TimeLimit", "ClientNotificationUrl", "Url", "Twiml", "ApplicationSid",
})
CALL_EVENTS = ("initiated", "ringing", "answered", "completed")  # StatusCallbackEvent values
# AnsweredBy values each MachineDetection mode reports.
AMD_ANSWERS = {
    "Enable": frozenset({"human", "machine_start", "fax", "unknown"}),
    "DetectMessageEnd": frozenset(
        {"human", "machine_end_beep", "machine_end_silence", "machine_end_other", "fax", "unknown"}
    ),
}
RING_BUFFER_S = 5.0  # Twilio may add this to a call's Timeout


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    form: dict[str, list[str]]
    headers: dict[str, str]
    at: datetime


@dataclass
class _Media:
    data: bytes
    content_type: str
    redirect: bool


@dataclass
class _Failure:
    status: int
    code: int | None
    message: str


@dataclass
class _Hold:
    seconds: float
    store: bool  # the message is created before the hold: Twilio got it, the answer is late


@dataclass
class _State:
    failures: list[_Failure] = field(default_factory=list)
    holds: list[_Hold] = field(default_factory=list)


_CALL_EXTRAS = frozenset(
    {"twiml", "url", "status_callback", "status_callback_event", "timeout", "machine_detection", "async_amd",
     "async_amd_status_callback", "machine_detection_timeout"}
)
_CALL_ENDED = frozenset({"completed", "busy", "failed", "no-answer", "canceled"})


def _call_options_problem(form: Mapping[str, list[str]]) -> str | None:
    """What Twilio refuses in a call's options, as its error message; None when all is well."""
    def one(name: str) -> str | None:
        values = form.get(name)
        return values[0] if values else None

    timeout = one("Timeout")
    if timeout is not None and (not timeout.isdigit() or not 1 <= int(timeout) <= 600):
        return f"Timeout must be a whole number of seconds from 1 to 600: {timeout}"
    events = set(form.get("StatusCallbackEvent", [])) - set(CALL_EVENTS)
    if events:
        return f"Invalid StatusCallbackEvent: {sorted(events)[0]}"
    mode = one("MachineDetection")
    if mode is not None and mode not in AMD_ANSWERS:
        return f"Invalid MachineDetection: {mode}"
    if one("AsyncAmd") not in (None, "true", "false"):
        return f"Invalid AsyncAmd: {one('AsyncAmd')}"
    amd_timeout = one("MachineDetectionTimeout")
    if amd_timeout is not None and (not amd_timeout.isdigit() or not 3 <= int(amd_timeout) <= 59):
        return f"MachineDetectionTimeout must be from 3 to 59: {amd_timeout}"
    for method in ("StatusCallbackMethod", "AsyncAmdStatusCallbackMethod", "Method"):
        if one(method) not in (None, "GET", "POST"):
            return f"Invalid {method}: {one(method)}"
    twiml = one("Twiml")
    if twiml is not None and len(twiml) > 4000:
        return "Twiml is over 4000 characters"
    return None


def _rfc2822(ts: datetime) -> str:
    return email.utils.format_datetime(ts.astimezone(UTC)).replace("-0000", "+0000")


def _parse_date(value: str) -> datetime:
    """A DateSent filter value: ``YYYY-MM-DD`` or the SDK's ``YYYY-MM-DDTHH:MM:SSZ``."""
    if len(value) == 10:
        return datetime.strptime(value, "%Y-%m-%d").replace(tzinfo=UTC)
    return datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)


class TwilioStandin:
    def __init__(
        self,
        account_sid: str | None = None,
        auth_token: str | None = None,
        phone_number: str = "+15550002222",
    ) -> None:
        self.account_sid = account_sid or "AC" + secrets.token_hex(16)
        self.auth_token = auth_token or secrets.token_hex(16)
        self.phone_number = phone_number
        self.requests: list[Recorded] = []
        self.messages: list[dict[str, Any]] = []  # Message resources, oldest first
        # Each message's Body as the sender asked for it, by sid: what Twilio stores (``messages``)
        # may be Smart Encoded, i.e. its curly quotes and dashes replaced.
        self.requested: dict[str, str] = {}
        self.calls: list[dict[str, Any]] = []  # Call resources, oldest first (with the TwiML sent)
        self.cdn_auth_seen: list[str] = []
        self.call_updates: list[dict[str, str]] = []  # POSTs to Calls/{sid}.json, oldest first
        self.callbacks_sent: list[tuple[str, dict[str, str], int]] = []  # (public URL, params, HTTP status)
        self._gateway: str | None = None
        self._sequence: dict[str, int] = {}  # call sid -> last SequenceNumber sent
        self._answered_at: dict[str, datetime] = {}
        self._created: dict[str, datetime] = {}  # sid -> when created (the resource keeps RFC 2822)
        self._callbacks: dict[str, str] = {}  # sid -> StatusCallback URL
        self._media: dict[str, _Media] = {}
        self._state = _State()
        self._lock = threading.Lock()
        self._released = threading.Event()  # set by stop(): held requests return at once
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------

    def start(self) -> "TwilioStandin":
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out as two writes: without this, Nagle holds the body for the
            # client's delayed ACK (~40 ms on loopback), a cost no real Twilio response has
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                standin._handle(self, "GET")

            def do_POST(self) -> None:
                standin._handle(self, "POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """The API base, for TWILIO_API_BASE_URL."""
        return f"http://127.0.0.1:{self.port}"

    def env(self, owner_phone: str | None = None) -> dict[str, str]:
        """TWILIO_* (and OWNER_PHONE when given) for a service that should use this stand-in."""
        values = {
            "TWILIO_ACCOUNT_SID": self.account_sid,
            "TWILIO_AUTH_TOKEN": self.auth_token,
            "TWILIO_PHONE_NUMBER": self.phone_number,
            "TWILIO_API_BASE_URL": self.url,
        }
        if owner_phone is not None:
            values["OWNER_PHONE"] = owner_phone
        return values

    # ---- programming it -------------------------------------------------------------------

    def fail_next(self, n: int = 1, status: int = 500, code: int | None = None, message: str | None = None) -> None:
        """The next ``n`` message creates answer ``status`` with Twilio's error JSON, creating nothing."""
        failure = _Failure(status, code, message or f"Stand-in failure (HTTP {status})")
        with self._lock:
            self._state.failures.extend([failure] * n)

    def delay_next(self, seconds: float, n: int = 1, store: bool = True) -> None:
        """Hold the next ``n`` message creates ``seconds`` before answering (a client timeout,
        or a window to kill the sender in). ``store``: the message is created before the hold,
        as when Twilio accepted it but the answer never arrived."""
        with self._lock:
            self._state.holds.extend([_Hold(seconds, store)] * n)

    def add_media(self, name: str, data: bytes, content_type: str, redirect: bool = False) -> str:
        """Serve ``data`` at ``/media/<name>`` (Basic auth) and return its URL."""
        with self._lock:
            self._media[name] = _Media(data, content_type, redirect)
        return f"{self.url}/media/{name}"

    # ---- reading it back ------------------------------------------------------------------

    def bodies(self, to: str | None = None) -> list[str]:
        """The messages' bodies as the sender wrote them (``messages`` has them as Twilio stores
        them, Smart Encoded where asked)."""
        with self._lock:
            return [self.requested.get(m["sid"], m["body"]) for m in self.messages if to is None or m["to"] == to]

    def creates(self) -> list[Recorded]:
        """Every POST to Messages.json, answered or not."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path.endswith("/Messages.json")]

    def status_callback(self, message_sid: str) -> str | None:
        with self._lock:
            return self._callbacks.get(message_sid)

    def send_status(
        self,
        gateway_url: str,
        message_sid: str,
        status: str,
        *,
        auth_token: str | None = None,
        error_code: str | None = None,
    ) -> httpx.Response:
        """POST Twilio's status callback for ``message_sid`` to the gateway at ``gateway_url``.

        It is signed over the StatusCallback URL the sender gave (PUBLIC_BASE_URL based, as
        the gateway validates it) and sent to the same path and query on ``gateway_url``.
        The message's status (and date_sent, on "sent") is updated here too.
        """
        with self._lock:
            message = next((m for m in self.messages if m["sid"] == message_sid), None)
            callback = self._callbacks.get(message_sid)
            if message is None or callback is None:
                raise KeyError(f"no message {message_sid} with a StatusCallback")
            message["status"] = status
            if status == "sent" and message["date_sent"] is None:
                message["date_sent"] = _rfc2822(datetime.now(UTC))
            params = {
                "MessageSid": message_sid, "SmsSid": message_sid, "AccountSid": self.account_sid,
                "From": message["from"], "To": message["to"], "MessageStatus": status, "SmsStatus": status,
                "ApiVersion": "2010-04-01",
            }
        if error_code is not None:
            params["ErrorCode"] = error_code
        signature = twilio_signature(auth_token or self.auth_token, callback, params)
        parts = urlsplit(callback)
        target = gateway_url.rstrip("/") + parts.path + (f"?{parts.query}" if parts.query else "")
        return httpx.post(target, data=params, headers={"X-Twilio-Signature": signature}, timeout=10.0)

    # ---- the HTTP side --------------------------------------------------------------------

    def _handle(self, h: BaseHTTPRequestHandler, method: str) -> None:
        parts = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        form = parse_qs(raw.decode("utf-8", errors="replace"), keep_blank_values=True) if method == "POST" else {}
        record = Recorded(method, parts.path, parse_qs(parts.query), form, dict(h.headers.items()), datetime.now(UTC))
        with self._lock:
            self.requests.append(record)
        try:
            if parts.path.startswith("/cdn/"):
                self._cdn(h, parts.path.removeprefix("/cdn/"))
                return
            if not self._authorized(h):
                self._error(h, 401, 20003, "Authenticate")
                return
            if parts.path.startswith("/media/"):
                self._media_get(h, parts.path.removeprefix("/media/"))
                return
            self._api(h, method, parts.path, record)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout, a killed sender): nothing to answer

    def _authorized(self, h: BaseHTTPRequestHandler) -> bool:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        return secrets.compare_digest(h.headers.get("Authorization", ""), f"Basic {expected}")

    def _api(self, h: BaseHTTPRequestHandler, method: str, path: str, record: Recorded) -> None:
        prefix = f"{API}/Accounts/{self.account_sid}/Messages"
        calls = f"{API}/Accounts/{self.account_sid}/Calls"
        if method == "POST" and path == calls + ".json":
            self._create_call(h, record.form)
        elif method == "POST" and path.startswith(calls + "/") and path.endswith(".json"):
            self._update_call(h, path[len(calls) + 1 : -len(".json")], record.form)
        elif method == "POST" and path == prefix + ".json":
            self._create(h, record.form)
        elif method == "GET" and path == prefix + ".json":
            self._list(h, record.query)
        elif method == "GET" and path.startswith(prefix + "/") and path.endswith(".json"):
            sid = path[len(prefix) + 1 : -len(".json")]
            with self._lock:
                found = next((dict(m) for m in self.messages if m["sid"] == sid), None)
            if found is None:
                self._error(h, 404, 20404, f"The requested resource {path} was not found")
            else:
                self._json(h, 200, found)
        else:
            self._error(h, 404, 20404, f"The requested resource {path} was not found")

    def _create(self, h: BaseHTTPRequestHandler, form: Mapping[str, list[str]]) -> None:
        def one(name: str) -> str | None:
            values = form.get(name)
            return values[0] if values else None

        unknown = sorted(set(form) - MESSAGE_PARAMS)
        if unknown:
            self._error(h, 400, 20001, f"Invalid parameter: {unknown[0]}")
            return
        smart = one("SmartEncoded")
        if smart is not None and smart.lower() not in ("true", "false"):
            self._error(h, 400, 20001, f"Invalid parameter: SmartEncoded must be true or false, not {smart!r}")
            return
        with self._lock:
            failure = self._state.failures.pop(0) if self._state.failures else None
            hold = self._state.holds.pop(0) if self._state.holds and failure is None else None
        if failure is not None:
            self._error(h, failure.status, failure.code, failure.message)
            return
        to, from_, body, media = one("To"), one("From"), one("Body") or "", form.get("MediaUrl", [])
        requested = body
        if smart is not None and smart.lower() == "true":
            body = smart_encoded(body)
        if not to:
            self._error(h, 400, 21604, "A 'To' phone number is required.")
            return
        if not from_:
            self._error(h, 400, 21603, "A 'From' phone number is required.")
            return
        if not body and not media:
            self._error(h, 400, 21602, "Message body is required.")
            return
        if len(body) > 1600:
            self._error(h, 400, 21617, "The concatenated message body exceeds the 1600 character limit.")
            return
        message: dict[str, Any] | None = None
        if hold is None or hold.store:
            message = self._store(to, from_, body, media, one("StatusCallback"), requested)
        if hold is not None:
            self._released.wait(hold.seconds)
            if message is None:
                message = self._store(to, from_, body, media, one("StatusCallback"), requested)
        assert message is not None
        self._json(h, 201, message)

    def _store(
        self, to: str, from_: str, body: str, media: list[str], callback: str | None, requested: str
    ) -> dict[str, Any]:
        now = datetime.now(UTC)
        sid = "SM" + secrets.token_hex(16)
        uri = f"{API}/Accounts/{self.account_sid}/Messages/{sid}"
        message: dict[str, Any] = {
            "sid": sid, "account_sid": self.account_sid, "api_version": "2010-04-01",
            "from": from_, "to": to, "body": body, "status": "queued", "direction": "outbound-api",
            "num_media": str(len(media)), "num_segments": str(max(1, -(-len(body) // 153))),
            "messaging_service_sid": None, "price": None, "price_unit": None,
            "error_code": None, "error_message": None,
            "date_created": _rfc2822(now), "date_sent": None, "date_updated": _rfc2822(now),
            "uri": uri + ".json", "subresource_uris": {"media": uri + "/Media.json"},
        }
        with self._lock:
            self.messages.append(message)
            self.requested[sid] = requested
            self._created[sid] = now
            if callback:
                self._callbacks[sid] = callback
        return dict(message)

    def _create_call(self, h: BaseHTTPRequestHandler, form: Mapping[str, list[str]]) -> None:
        def one(name: str) -> str | None:
            values = form.get(name)
            return values[0] if values else None

        unknown = sorted(set(form) - CALL_PARAMS)
        if unknown:
            self._error(h, 400, 20001, f"Invalid parameter: {unknown[0]}")
            return
        to, from_, twiml, url = one("To"), one("From"), one("Twiml"), one("Url")
        if not to:
            self._error(h, 400, 21201, "No 'To' number is specified")
            return
        if not from_:
            self._error(h, 400, 21213, "No 'From' number is specified")
            return
        if not twiml and not url:
            self._error(h, 400, 21205, "Either Url, Twiml or ApplicationSid is required")
            return
        problem = _call_options_problem(form)
        if problem is not None:
            self._error(h, 400, 21218 if "Timeout" in problem else 20001, problem)
            return
        now = datetime.now(UTC)
        sid = "CA" + secrets.token_hex(16)
        uri = f"{API}/Accounts/{self.account_sid}/Calls/{sid}"
        call: dict[str, Any] = {
            "sid": sid, "account_sid": self.account_sid, "api_version": "2010-04-01",
            "to": to, "to_formatted": to, "from": from_, "from_formatted": from_, "status": "queued",
            "direction": "outbound-api", "parent_call_sid": None, "phone_number_sid": None,
            "start_time": None, "end_time": None, "duration": None, "price": None, "price_unit": "USD",
            "answered_by": None, "forwarded_from": None, "caller_name": None, "group_sid": None,
            "queue_time": "0", "trunk_sid": None,
            "date_created": _rfc2822(now), "date_updated": _rfc2822(now),
            "uri": uri + ".json",
            "subresource_uris": {"notifications": uri + "/Notifications.json", "recordings": uri + "/Recordings.json"},
        }
        with self._lock:
            # What was asked for, beside the resource: tests read the TwiML and the callbacks.
            self.calls.append({
                **call, "twiml": twiml, "url": url, "status_callback": one("StatusCallback"),
                "status_callback_event": list(form.get("StatusCallbackEvent", [])),
                "timeout": int(one("Timeout") or 60), "machine_detection": one("MachineDetection"),
                "async_amd": one("AsyncAmd"), "async_amd_status_callback": one("AsyncAmdStatusCallback"),
                # None: not sent (Twilio then gives up after 30 s)
                "machine_detection_timeout": int(one("MachineDetectionTimeout") or 0) or None,
            })
            callback = one("StatusCallback")
            if callback:
                self._callbacks[sid] = callback
        self._json(h, 201, call)

    def _update_call(self, h: BaseHTTPRequestHandler, sid: str, form: Mapping[str, list[str]]) -> None:
        statuses = form.get("Status")
        status = statuses[0] if statuses else None
        with self._lock:
            call = next((c for c in self.calls if c["sid"] == sid), None)
        if call is None:
            self._error(h, 404, 20404, f"The requested resource {API}/Accounts/{self.account_sid}/Calls/{sid}.json "
                        "was not found")
            return
        if status not in (None, "completed", "canceled"):
            self._error(h, 400, 21220, f"Invalid Status: {status}")
            return
        with self._lock:
            self.call_updates.append({"sid": sid, **{k: v[0] for k, v in form.items()}})
            resource = {k: v for k, v in call.items() if k not in _CALL_EXTRAS}
        if status is not None and call["status"] not in _CALL_ENDED:
            # Twilio answers, then posts the call's completed callback on its own time
            threading.Thread(target=self.end_call, args=(sid, status if status == "canceled" else "completed"),
                             daemon=True).start()
        self._json(h, 200, resource)

    # ---- a placed call, as the test drives it ---------------------------------------------------

    def callbacks_to(self, gateway_url: str) -> None:
        """Deliver every call callback to ``gateway_url`` (same path and query as the public URL)."""
        self._gateway = gateway_url.rstrip("/")

    def call(self, sid: str) -> dict[str, Any]:
        with self._lock:
            return dict(next(c for c in self.calls if c["sid"] == sid))

    def ring(self, sid: str, answer_after: float | None) -> bool:
        """initiated, ringing, then answered after ``answer_after`` seconds, or no-answer once the
        call's Timeout (+ Twilio's buffer) is over first (None: nobody answers). Blocks; True: answered."""
        self._progress(sid, "initiated", "initiated")
        self._progress(sid, "ringing", "ringing")
        limit = self.call(sid)["timeout"] + RING_BUFFER_S
        if answer_after is None or answer_after > limit:
            self._released.wait(limit)
            self.end_call(sid, "no-answer")
            return False
        self._released.wait(answer_after)
        with self._lock:
            call = next(c for c in self.calls if c["sid"] == sid)
            call["status"], call["start_time"] = "in-progress", _rfc2822(datetime.now(UTC))
            self._answered_at[sid] = datetime.now(UTC)
        self._progress(sid, "answered", "in-progress")
        return True

    def answered_by(self, sid: str, answered_by: str, detection_ms: int = 4200) -> httpx.Response:
        """Twilio's async AMD verdict, signed, to the call's AsyncAmdStatusCallback."""
        call = self.call(sid)
        mode, url = call["machine_detection"], call["async_amd_status_callback"]
        if call["async_amd"] != "true" or not url or mode not in AMD_ANSWERS:
            raise AssertionError(f"call {sid} asked for no async AMD: {mode}, {call['async_amd']}, {url}")
        if answered_by not in AMD_ANSWERS[mode]:
            raise AssertionError(f"MachineDetection={mode} never reports AnsweredBy={answered_by}")
        with self._lock:
            next(c for c in self.calls if c["sid"] == sid)["answered_by"] = answered_by
        params = {
            "AccountSid": self.account_sid, "CallSid": sid, "AnsweredBy": answered_by,
            "MachineDetectionDuration": str(detection_ms),
        }
        return self._deliver(url, params)

    def end_call(self, sid: str, status: str = "completed") -> None:
        """The call is over (hung up, or busy, no-answer, failed, canceled): its completed callback."""
        with self._lock:
            call = next(c for c in self.calls if c["sid"] == sid)
            if call["status"] in _CALL_ENDED:
                return
            call["status"], call["end_time"] = status, _rfc2822(datetime.now(UTC))
            answered = self._answered_at.get(sid)
            duration = int((datetime.now(UTC) - answered).total_seconds()) if answered else 0
            call["duration"] = str(duration)
        self._progress(sid, "completed", status, CallDuration=str(duration))

    def _progress(self, sid: str, event: str, status: str, **extra: str) -> httpx.Response | None:
        call = self.call(sid)
        wanted = call["status_callback_event"] or ["completed"]
        url = call["status_callback"]
        if not url or event not in wanted:
            return None
        with self._lock:
            seq = self._sequence[sid] = self._sequence.get(sid, -1) + 1
        params = {
            "AccountSid": self.account_sid, "ApiVersion": "2010-04-01", "CallSid": sid, "CallStatus": status,
            "Called": call["to"], "Caller": call["from"], "Direction": "outbound-api", "From": call["from"],
            "To": call["to"], "CallbackSource": "call-progress-events", "SequenceNumber": str(seq),
            "Timestamp": _rfc2822(datetime.now(UTC)), **extra,
        }
        if call["answered_by"]:
            params["AnsweredBy"] = call["answered_by"]
        return self._deliver(url, params)

    def _deliver(self, url: str, params: dict[str, str]) -> httpx.Response:
        if self._gateway is None:
            raise AssertionError("callbacks_to(gateway_url) first")
        parts = urlsplit(url)
        target = self._gateway + parts.path + (f"?{parts.query}" if parts.query else "")
        signature = twilio_signature(self.auth_token, url, params)
        response = httpx.post(target, data=params, headers={"X-Twilio-Signature": signature}, timeout=10.0)
        with self._lock:
            self.callbacks_sent.append((url, params, response.status_code))
        return response

    def _list(self, h: BaseHTTPRequestHandler, query: Mapping[str, list[str]]) -> None:
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        try:
            size = max(1, min(1000, int(one("PageSize") or 50)))
            page = max(0, int(one("Page") or 0))
            on, before, after = (
                (_parse_date(v) if v else None) for v in (one("DateSent"), one("DateSent<"), one("DateSent>"))
            )
        except ValueError as exc:
            self._error(h, 400, 20001, f"Invalid filter: {exc}")
            return
        to, from_ = one("To"), one("From")
        with self._lock:
            found = []
            for message in reversed(self.messages):  # Twilio lists newest first
                if (to and message["to"] != to) or (from_ and message["from"] != from_):
                    continue
                if on or before or after:
                    if message["date_sent"] is None:
                        continue
                    sent = email.utils.parsedate_to_datetime(message["date_sent"])
                    if on and sent.date() != on.date():
                        continue
                    if before and sent > before:
                        continue
                    if after and sent < after:
                        continue
                found.append(dict(message))
        chunk = found[page * size : (page + 1) * size]
        base = f"{API}/Accounts/{self.account_sid}/Messages.json"
        more = (page + 1) * size < len(found)
        self._json(h, 200, {
            "messages": chunk,
            "first_page_uri": f"{base}?PageSize={size}&Page=0",
            "next_page_uri": f"{base}?PageSize={size}&Page={page + 1}" if more else None,
            "previous_page_uri": f"{base}?PageSize={size}&Page={page - 1}" if page else None,
            "page": page, "page_size": size, "start": page * size, "end": page * size + max(len(chunk) - 1, 0),
            "uri": f"{base}?PageSize={size}&Page={page}",
        })

    def _media_get(self, h: BaseHTTPRequestHandler, name: str) -> None:
        with self._lock:
            media = self._media.get(name)
        if media is None:
            self._error(h, 404, 20404, f"No media {name}")
            return
        if media.redirect:
            h.send_response(302)
            h.send_header("Location", f"http://localhost:{self.port}/cdn/{name}")
            h.send_header("Content-Length", "0")
            h.end_headers()
            return
        self._bytes(h, media)

    def _cdn(self, h: BaseHTTPRequestHandler, name: str) -> None:
        auth = h.headers.get("Authorization")
        with self._lock:
            if auth:
                self.cdn_auth_seen.append(auth)
            media = self._media.get(name)
        if media is None:
            self._error(h, 404, 20404, f"No media {name}")
            return
        self._bytes(h, media)

    @staticmethod
    def _bytes(h: BaseHTTPRequestHandler, media: _Media) -> None:
        h.send_response(200)
        h.send_header("Content-Type", media.content_type)
        h.send_header("Content-Length", str(len(media.data)))
        h.end_headers()
        h.wfile.write(media.data)

    @staticmethod
    def _json(h: BaseHTTPRequestHandler, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)

    def _error(self, h: BaseHTTPRequestHandler, status: int, code: int | None, message: str) -> None:
        body = {"code": code, "message": message, "more_info": f"{ERRORS}{code}" if code else None, "status": status}
        self._json(h, status, body)
