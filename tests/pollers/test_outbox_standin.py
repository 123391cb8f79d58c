"""The Twilio stand-in itself, through the official SDK: auth, errors as TwilioRestException,
list filters, and status callbacks signed so that Twilio's own RequestValidator accepts them."""

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl

import pytest
from twilio.base.exceptions import TwilioRestException
from twilio.request_validator import RequestValidator
from twilio.rest import Client

from delegate.runtime.twilio_rest import BaseUrlTwilioHttpClient
from tests.support.twilio_standin import TwilioStandin


@pytest.fixture(name="standin")
def standin_fixture() -> Iterator[TwilioStandin]:
    standin = TwilioStandin().start()
    yield standin
    standin.stop()


def _client(standin: TwilioStandin, token: str | None = None) -> Client:
    http = BaseUrlTwilioHttpClient(standin.url, timeout=5)
    return Client(standin.account_sid, token or standin.auth_token, http_client=http)


def test_the_sdk_sends_lists_and_fetches_through_the_standin(standin: TwilioStandin) -> None:
    client = _client(standin)
    first = client.messages.create(to="+15550001111", from_=standin.phone_number, body="one")
    client.messages.create(to="+15550003333", from_=standin.phone_number, body="two")
    assert first.sid.startswith("SM") and first.status == "queued" and first.body == "one"
    assert [m.body for m in client.messages.list(to="+15550001111")] == ["one"]
    assert [m.body for m in client.messages.list(from_=standin.phone_number)] == ["two", "one"]  # newest first
    assert client.messages(first.sid).fetch().to == "+15550001111"
    assert len(client.messages.list(page_size=1)) == 2  # follows next_page_uri


def test_wrong_credentials_and_bad_requests_are_twilio_errors(standin: TwilioStandin) -> None:
    with pytest.raises(TwilioRestException) as denied:
        _client(standin, token="wrong").messages.create(to="+15550001111", from_=standin.phone_number, body="x")
    assert denied.value.status == 401 and denied.value.code == 20003
    with pytest.raises(TwilioRestException) as too_long:
        _client(standin).messages.create(to="+15550001111", from_=standin.phone_number, body="x" * 1601)
    assert too_long.value.status == 400 and too_long.value.code == 21617
    assert standin.messages == []


def test_a_status_callback_is_signed_over_the_public_url_and_sent_to_the_gateway(standin: TwilioStandin) -> None:
    received: list[dict[str, Any]] = []

    class Gateway(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            received.append({"path": self.path, "params": dict(parse_qsl(body)),
                             "signature": self.headers["X-Twilio-Signature"]})
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        public = "https://delegate.example.test/sms/status?outbox=o1&parent=p1"
        sid = _client(standin).messages.create(
            to="+15550001111", from_=standin.phone_number, body="hi", status_callback=public
        ).sid
        response = standin.send_status(f"http://127.0.0.1:{server.server_address[1]}", sid, "delivered")
    finally:
        server.shutdown()
        server.server_close()

    assert response.status_code == 204
    (call,) = received
    assert call["path"] == "/sms/status?outbox=o1&parent=p1"
    assert call["params"]["MessageSid"] == sid and call["params"]["MessageStatus"] == "delivered"
    assert RequestValidator(standin.auth_token).validate(public, call["params"], call["signature"])
    assert standin.messages[0]["status"] == "delivered"
