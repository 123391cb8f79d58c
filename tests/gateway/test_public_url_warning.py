"""At start the gateway warns when PUBLIC_BASE_URL is http://: calls would get a ws:// stream URL,
and Twilio connects Media Streams over wss:// only (error 31922)."""

import logging
from pathlib import Path

import pytest

from delegate.gateway.main import warn_of_a_stream_url_twilio_refuses
from tests.support.system import System

from .helpers import gateway_settings

WARNING = (
    "PUBLIC_BASE_URL is http://phone.example.test, so phone calls get the stream URL "
    "ws://phone.example.test/call, which Twilio refuses"
)


@pytest.mark.integration
def test_a_gateway_started_with_an_http_public_url_says_twilio_will_refuse_its_stream_url(tmp_path: Path) -> None:
    system = System(tmp_path, env={"PUBLIC_BASE_URL": "http://phone.example.test", "TWILIO_AUTH_TOKEN": "token"},
                    separate=("gateway",))
    try:
        system.start("gateway")
        assert WARNING in system.procs["gateway"].log_text()
    finally:
        system.stop()


@pytest.mark.parametrize(
    ("public", "token"), [("https://phone.example.test", "token"), ("http://phone.example.test", None)]
)
def test_no_warning_over_https_or_without_twilio(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, public: str, token: str | None
) -> None:
    settings = gateway_settings("nats://127.0.0.1:4222", tmp_path, public_base_url=public, twilio_auth_token=token)
    with caplog.at_level(logging.WARNING):
        warn_of_a_stream_url_twilio_refuses(settings)
    assert caplog.records == []
