"""The owner-contact tools against real local servers: SMTP (aiosmtpd), a Twilio Messages stand-in,
the GitHub stand-in, and web_search through the OpenAI stand-in."""

import base64
import email
import email.policy
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiosmtpd.controller import Controller
from openai.types.responses import Response

from delegate.agent.tools import ToolRegistry
from delegate.agent.tools.local.web_search import citations
from delegate.contracts.messages import ToolCallRequest
from delegate.launcher.procs import free_port
from tests.support.github_standin import GitHubStandin
from tests.support.standin import StandinProcess

from .helpers import tool_settings

SID = "AC" + "1" * 32
TOKEN = "twilio-test-token"


class Capture:
    def __init__(self) -> None:
        self.messages: list[tuple[str, list[str], bytes]] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), envelope.content))
        return "250 Message accepted for delivery"


@pytest.fixture
def smtp() -> Iterator[tuple[int, Capture]]:
    capture = Capture()
    port = free_port()  # aiosmtpd's Controller(port=0) does not work: pick one first
    controller = Controller(capture, hostname="127.0.0.1", port=port)
    controller.start()
    yield port, capture
    controller.stop()


class TwilioMessages:
    """Twilio's Messages endpoint as the REST client sees it (twilio-email-wire.md 2.3)."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode()
                auth = base64.b64encode(f"{SID}:{TOKEN}".encode()).decode()
                fields = {k: v[0] for k, v in parse_qs(body).items()}
                standin.received.append({"path": self.path, "auth": self.headers.get("Authorization"), **fields})
                if self.path != f"/2010-04-01/Accounts/{SID}/Messages.json" or self.headers.get(
                    "Authorization") != f"Basic {auth}":
                    return self._json(401, {"code": 20003, "message": "Authenticate", "status": 401,
                                            "more_info": "https://www.twilio.com/docs/errors/20003"})
                if fields.get("To") == "+15005550001":
                    return self._json(400, {"code": 21211, "message": "The 'To' number is not a valid phone number.",
                                            "status": 400, "more_info": "https://www.twilio.com/docs/errors/21211"})
                self._json(201, {"sid": "SM" + "a" * 32, "account_sid": SID, "api_version": "2010-04-01",
                                 "from": fields.get("From"), "to": fields.get("To"), "body": fields.get("Body"),
                                 "status": "queued", "direction": "outbound-api", "num_media": "0",
                                 "num_segments": "1", "error_code": None, "error_message": None,
                                 "date_created": "Mon, 03 Feb 2025 17:02:11 +0000", "date_sent": None,
                                 "date_updated": "Mon, 03 Feb 2025 17:02:11 +0000",
                                 "uri": f"/2010-04-01/Accounts/{SID}/Messages/SM{'a' * 32}.json"})

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _req(name: str, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(name=name, arguments=arguments)


async def test_email_and_sms_to_the_owner(tmp_path: Path, smtp: tuple[int, Capture]) -> None:
    port, capture = smtp
    twilio = TwilioMessages()
    registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(
        smtp_host="127.0.0.1", smtp_port=port, smtp_tls="none", smtp_from="delegate@example.test",
        owner_email="owner@example.test",
        twilio_account_sid=SID, twilio_auth_token=TOKEN, twilio_phone_number="+15550002222",
        owner_phone="+15550001111", twilio_api_base_url=twilio.url,
    ))
    await registry.start()
    try:
        specs = {s.name: s for s in registry.specs()}
        assert {"send_email_to_owner", "send_sms_to_owner"} <= set(specs)
        assert "owner_contact" in specs["send_sms_to_owner"].tags
        assert "to" not in specs["send_email_to_owner"].parameters["properties"]  # the owner only

        sent = await registry.call(_req("send_email_to_owner", subject="Reminder", text="Dentist at 3pm."))
        assert sent.ok, sent.output
        assert len(capture.messages) == 1
        mail_from, rcpt, raw = capture.messages[0]
        msg = email.message_from_bytes(raw, policy=email.policy.default)
        assert (mail_from, rcpt) == ("delegate@example.test", ["owner@example.test"])
        assert msg["Subject"] == "Reminder" and msg.get_content().strip() == "Dentist at 3pm."
        assert msg["Message-ID"] in sent.output

        texted = await registry.call(_req("send_sms_to_owner", text="Running 10 min late"))
        assert texted.ok, texted.output
        assert "SM" + "a" * 32 in texted.output
        got = twilio.received[-1]
        assert (got["To"], got["From"], got["Body"]) == ("+15550001111", "+15550002222", "Running 10 min late")

        too_long = await registry.call(_req("send_sms_to_owner", text="x" * 1601))
        assert too_long.error_code == "invalid_arguments"
    finally:
        await registry.aclose()
        twilio.stop()


async def test_channel_errors_are_tool_errors(tmp_path: Path) -> None:
    twilio = TwilioMessages()
    dead_smtp = free_port()  # nothing listens here
    registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(
        smtp_host="127.0.0.1", smtp_port=dead_smtp, smtp_tls="none", owner_email="owner@example.test",
        twilio_account_sid=SID, twilio_auth_token=TOKEN, twilio_phone_number="+15550002222",
        owner_phone="+15005550001", twilio_api_base_url=twilio.url,
    ))
    await registry.start()
    try:
        mail = await registry.call(_req("send_email_to_owner", subject="s", text="t"))
        assert mail.error_code == "unavailable" and f"127.0.0.1:{dead_smtp}" in mail.output
        sms = await registry.call(_req("send_sms_to_owner", text="hi"))
        assert sms.error_code == "failed" and "21211" in sms.output and "not a valid phone number" in sms.output
    finally:
        await registry.aclose()
        twilio.stop()


async def test_github_issues_and_pull_requests(tmp_path: Path) -> None:
    gh = GitHubStandin(token="gh-secret").start()
    gh.add_issue("acme/app", "Crash on start", body="Stack trace attached", labels=["bug"])
    gh.add_issue("acme/app", "Old idea", state="closed")
    gh.add_pull("acme/app", "Fix the crash", head="fix-crash")
    gh.add_comment("acme/app", 1, "Seen on 1.2 too")
    gh.repo("acme/other")
    registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(
        github_token="gh-secret", github_api_base_url=gh.url, github_repos="acme/app, acme/other"))
    await registry.start()
    try:
        specs = {s.name: s for s in registry.specs()}
        assert {"github_list_issues", "github_get_issue", "github_create_issue", "github_comment",
                "github_list_pull_requests"} <= set(specs)
        assert specs["github_list_issues"].parameters["properties"]["repo"]["enum"] == ["acme/app", "acme/other"]

        issues = await registry.call(_req("github_list_issues", repo="acme/app"))
        assert issues.ok and "#1 (open) Crash on start [bug]" in issues.output
        assert "Fix the crash" not in issues.output and "Old idea" not in issues.output  # no PRs, no closed
        closed = await registry.call(_req("github_list_issues", repo="acme/app", state="closed"))
        assert "Old idea" in closed.output

        one = json.loads((await registry.call(_req("github_get_issue", repo="acme/app", number=1))).output)
        assert one["title"] == "Crash on start" and one["comments"][0]["body"] == "Seen on 1.2 too"

        made = await registry.call(_req("github_create_issue", repo="acme/app", title="Dark mode", labels=["idea"]))
        assert made.ok and "#4" in made.output
        assert gh.issue("acme/app", 4)["labels"][0]["name"] == "idea"

        commented = await registry.call(_req("github_comment", repo="acme/app", number=3, body="LGTM"))
        assert commented.ok and gh.comments("acme/app", 3)[0]["body"] == "LGTM"

        pulls = await registry.call(_req("github_list_pull_requests", repo="acme/app"))
        assert "#3 (open) Fix the crash" in pulls.output and "fix-crash → main" in pulls.output

        outside = await registry.call(_req("github_list_issues", repo="evil/repo"))
        assert outside.error_code == "invalid_arguments" and "is not one of" in outside.output
        missing = await registry.call(_req("github_get_issue", repo="acme/app", number=99))
        assert missing.error_code == "failed" and "404" in missing.output
        assert all(r.headers["Authorization"] == "Bearer gh-secret" for r in gh.requests)
        assert all(r.headers["X-GitHub-Api-Version"] == "2022-11-28" for r in gh.requests)
    finally:
        await registry.aclose()

    wrong = ToolRegistry(tmp_path / "rt2", None, settings=tool_settings(
        github_token="nope", github_api_base_url=gh.url, github_repos="acme/app"))
    await wrong.start()
    try:
        denied = await wrong.call(_req("github_list_issues"))  # the only repo is the default
        assert denied.error_code == "failed" and "401" in denied.output and "GITHUB_TOKEN" in denied.output
    finally:
        await wrong.aclose()
        gh.stop()


async def test_web_search_through_the_responses_api(tmp_path: Path) -> None:
    with StandinProcess() as standin:
        standin.script({"action": "text", "text": "The museum opens at 10:00 on Sundays."})
        registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(
            openai_api_key="sk-standin-test", openai_base_url=standin.base_url, openai_model="gpt-test"))
        await registry.start()
        try:
            assert "web_search" in {s.name for s in registry.specs("voice")}
            found = await registry.call(_req("web_search", query="When does the city museum open on Sunday?"))
            assert found.ok and "opens at 10:00" in found.output
            body = standin.response_requests()[-1]["body"]
            assert body["tools"] == [{"type": "web_search"}]
            assert body["input"] == "When does the city museum open on Sunday?" and body["model"] == "gpt-test"
        finally:
            await registry.aclose()


def test_web_search_lists_cited_urls_first() -> None:
    response = Response.model_validate({
        "id": "resp_1", "object": "response", "created_at": 1, "model": "m", "parallel_tool_calls": True,
        "tool_choice": "auto", "tools": [], "output": [
            {"type": "web_search_call", "id": "ws_1", "status": "completed",
             "action": {"type": "search", "query": "q", "sources": [{"type": "url", "url": "https://a.example/x"},
                                                                      {"type": "url", "url": "https://b.example/y"}]}},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed", "content": [
                {"type": "output_text", "text": "Answer", "annotations": [
                    {"type": "url_citation", "url": "https://b.example/y", "title": "B", "start_index": 0,
                     "end_index": 6}]}]}]})
    assert citations(response) == [("https://b.example/y", "B"), ("https://a.example/x", "")]
