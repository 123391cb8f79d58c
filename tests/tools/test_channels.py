"""The owner-contact tools through the agent's outbox (a real ledger; the test plays the pollers,
who deliver from CHANNELS and record the outcome), the GitHub stand-in, and web_search through
the OpenAI stand-in."""

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats.js.errors
import pytest
from openai.types.responses import Response

from delegate.agent.ledger import Ledger
from delegate.agent.outbound import Outbox
from delegate.agent.tools import ToolRegistry
from delegate.agent.tools.local.web_search import citations
from delegate.contracts import subjects, topics
from delegate.contracts.channels import OUTBOUND_ADAPTER, OutboundEmail, OutboundSms
from delegate.contracts.events import Delivery, make_event
from delegate.contracts.messages import ToolCallRequest
from delegate.runtime.bus import Bus
from tests.support.github_standin import GitHubStandin
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .helpers import ledger_events, tool_settings

OWNER = {
    "smtp_host": "127.0.0.1", "owner_email": "owner@example.test",
    "twilio_account_sid": "AC" + "1" * 32, "twilio_auth_token": "twilio-test-token",
    "twilio_phone_number": "+15550002222", "owner_phone": "+15550001111",
}


def _req(name: str, **arguments: Any) -> ToolCallRequest:
    return ToolCallRequest(name=name, arguments=arguments)


@pytest.fixture
def ledger_system(tmp_path: Path) -> Iterator[System]:
    system = System(tmp_path / "sys")
    try:
        yield system.start("ledger")
    finally:  # a start that fails must not leave its processes running
        system.stop()


@pytest.fixture
async def bus(ledger_system: System) -> AsyncIterator[Bus]:
    assert ledger_system.nats is not None
    connection = await Bus.connect(ledger_system.nats.url, "owner-tools-test")
    await connection.ensure_streams(all_owners=True)
    yield connection
    await connection.close()


async def owner_registry(bus: Bus, runtime: Path, **settings: Any) -> ToolRegistry:
    outbox = Outbox(bus, Ledger(bus))
    registry = ToolRegistry(runtime, bus, settings=tool_settings(**{**OWNER, **settings}), outbox=outbox)
    await registry.start()
    return registry


async def queued(bus: Bus, subject: str, outbox_id: str, timeout: float = 10.0) -> OutboundSms | OutboundEmail:
    """The outbound message as the pollers read it from CHANNELS."""

    async def last() -> OutboundSms | OutboundEmail | None:
        try:
            raw = await bus.js.get_last_msg("CHANNELS", subject)
        except nats.js.errors.NotFoundError:
            return None
        msg = OUTBOUND_ADAPTER.validate_json(raw.data) if raw.data else None
        return msg if msg is not None and msg.id == outbox_id else None

    return await eventually(last, f"{outbox_id} queued on {subject}", timeout)


async def record_outcome(bus: Bus, msg: OutboundSms | OutboundEmail, status: str, **fields: Any) -> None:
    """What the pollers record once they sent (or gave up on) an outbound message."""
    delivery = Delivery(outbox_id=msg.id, channel=msg.type, status=status, final=True, **fields)
    event = make_event(delivery, conversation_id=msg.conversation_id, span_id=msg.span_id, channel=msg.type,
                       parent_id=msg.parent_id, id=f"{msg.id}:{status}")
    await bus.publish(topics.ledger_append("test"), event, msg_id=event.id)


@pytest.mark.integration
async def test_owner_tools_queue_on_the_outbox_and_report_the_senders_outcome(bus: Bus, tmp_path: Path) -> None:
    registry = await owner_registry(bus, tmp_path / "rt")
    try:
        specs = {s.name: s for s in registry.specs()}
        assert {"send_email_to_owner", "send_sms_to_owner"} <= set(specs)
        assert "owner_contact" in specs["send_sms_to_owner"].tags
        assert "to" not in specs["send_email_to_owner"].parameters["properties"]  # the owner only

        sms_req = ToolCallRequest(name="send_sms_to_owner", arguments={"text": "Running 10 min late"},
                                  call_id="call_sms_1", conversation_id="conv-1", span_id="span-1", channel="text")
        texting = asyncio.create_task(registry.call(sms_req))
        sms = await queued(bus, subjects.CHANNELS_SMS_OUT, "call_sms_1")
        assert isinstance(sms, OutboundSms)
        assert (sms.text, sms.origin, sms.conversation_id, sms.span_id) == ("Running 10 min late", "tool", "conv-1",
                                                                             "span-1")
        await record_outcome(bus, sms, "sent", external_ids=["SM" + "a" * 32])
        texted = await asyncio.wait_for(texting, 30)
        assert texted.ok, texted.output
        assert texted.output.startswith("sent") and "SM" + "a" * 32 in texted.output
        # The outbound hangs off the recorded tool.call, as the timeline shows it.
        [call] = [e for e in await ledger_events(bus) if e.kind == "tool.call" and e.payload["call_id"] == "call_sms_1"]
        assert sms.parent_id == call.id

        mail_req = ToolCallRequest(name="send_email_to_owner", call_id="call_mail_1",
                                   arguments={"subject": "Reminder\r\nBcc: x@evil.test", "text": "Dentist at 3pm."})
        mailing = asyncio.create_task(registry.call(mail_req))
        mail = await queued(bus, subjects.CHANNELS_EMAIL_OUT, "call_mail_1")
        assert isinstance(mail, OutboundEmail)
        assert mail.subject == "Reminder Bcc: x@evil.test"  # one header line: no injected header
        assert (mail.text, mail.in_reply_to) == ("Dentist at 3pm.", None)
        await record_outcome(bus, mail, "failed", error="550 mailbox unavailable")
        refused = await asyncio.wait_for(mailing, 30)
        assert refused.error_code == "failed" and "550 mailbox unavailable" in refused.output

        too_long = await registry.call(_req("send_sms_to_owner", text="x" * 1601))
        assert too_long.error_code == "invalid_arguments"
        blank = await registry.call(_req("send_email_to_owner", subject="   ", text="t"))
        assert blank.error_code == "invalid_arguments"
    finally:
        await registry.aclose()


@pytest.mark.integration
async def test_an_owner_message_nobody_delivers_yet_is_reported_queued(bus: Bus, tmp_path: Path) -> None:
    registry = await owner_registry(bus, tmp_path / "rt", owner_delivery_wait_s=0.5)
    try:
        reply = await registry.call(
            ToolCallRequest(name="send_sms_to_owner", arguments={"text": "hi"}, call_id="call_sms_q"))
        assert reply.ok and reply.output.startswith("queued") and "timeline" in reply.output
        msg = await queued(bus, subjects.CHANNELS_SMS_OUT, "call_sms_q")
        assert msg.text == "hi"  # it stays in the outbox for the pollers
        # The same call run again (a retried request) is one message on the stream, not two.
        again = await registry.call(
            ToolCallRequest(name="send_sms_to_owner", arguments={"text": "hi"}, call_id="call_sms_q"))
        assert again.ok
        info = await bus.js.stream_info("CHANNELS", subjects_filter=subjects.CHANNELS_SMS_OUT)
        assert info.state.messages == 1
    finally:
        await registry.aclose()


async def test_owner_tools_are_not_offered_without_an_outbox(tmp_path: Path) -> None:
    registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(**OWNER))
    await registry.start()
    try:
        assert not {"send_email_to_owner", "send_sms_to_owner"} & {s.name for s in registry.specs()}
    finally:
        await registry.aclose()


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


@pytest.mark.integration
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
            assert body["include"] == ["web_search_call.action.sources"]
            assert body["input"] == "When does the city museum open on Sunday?" and body["model"] == "gpt-test"
        finally:
            await registry.aclose()


@pytest.mark.integration
async def test_web_search_lists_the_sources_it_asked_for(tmp_path: Path) -> None:
    """An answer citing nothing inline still names what the search read: the search call's sources,
    which the API sends only when the request asks for them (`include`)."""
    with StandinProcess() as standin:
        standin.script({
            "action": "web_search", "text": "The ferry runs every 30 minutes.", "append_citations": False,
            "results": [{"url": "https://ferry.example.org/timetable", "title": "Timetable"},
                        {"url": "https://news.example.com/ferry", "title": "Ferry news"}],
        })
        registry = ToolRegistry(tmp_path / "rt", None, settings=tool_settings(
            openai_api_key="sk-standin-test", openai_base_url=standin.base_url, openai_model="gpt-test"))
        await registry.start()
        try:
            found = await registry.call(_req("web_search", query="How often does the ferry run?"))
            assert found.ok and found.output.startswith("The ferry runs every 30 minutes.")
            assert "Sources:\n- https://ferry.example.org/timetable\n- https://news.example.com/ferry" in found.output
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
