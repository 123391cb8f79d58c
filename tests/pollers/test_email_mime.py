"""Hostile and unusual MIME through the real inbox: every message still becomes readable
input, never a crash, and attachments are stored safely or listed as not stored."""

import os
import stat
from pathlib import Path

import pytest

from delegate.contracts.events import MailProgress
from delegate.pollers import mime
from delegate.pollers.inbox import safe_filename
from tests.pollers import mails
from tests.pollers.conftest import OWNER, Rig

pytestmark = pytest.mark.integration

FROM = f"From: Owner <{OWNER}>"


async def test_html_only_mail_is_given_as_text(rig: Rig) -> None:
    await rig.start_inbox()
    rig.imap.append(mails.raw(
        FROM, "Subject: html", "Message-ID: <h1@example.com>", "MIME-Version: 1.0",
        'Content-Type: text/html; charset="utf-8"',
        body=b"<html><body><p>Call <b>Anna</b> about the <a href='https://x.example/q'>quote</a>.</p>"
             b"<script>alert(1)</script></body></html>",
    ))
    (item,) = await rig.wait_inputs(1)
    assert "Call **Anna** about the [quote](https://x.example/q)." in item["text"]
    assert "<b>" not in item["text"] and "<p>" not in item["text"]


async def test_unknown_charset_and_broken_base64_degrade_instead_of_failing(rig: Rig) -> None:
    await rig.start_inbox()
    rig.imap.append(
        mails.raw(FROM, "Subject: charset", "Message-ID: <c1@example.com>", "MIME-Version: 1.0",
                  'Content-Type: text/plain; charset="x-unknown"', "Content-Transfer-Encoding: 8bit",
                  body="Grüße \xff\xfe from nowhere".encode("latin-1")),
        mails.raw(FROM, "Subject: base64", "Message-ID: <c2@example.com>", "MIME-Version: 1.0",
                  "Content-Type: text/plain; charset=utf-8", "Content-Transfer-Encoding: base64",
                  body=mails.b64(b"Broken but readable")[:-6] + b"!!*$\r\n"),
    )
    first, second = await rig.wait_inputs(2)
    assert "from nowhere" in first["text"] and "\ufffd" in first["text"]
    assert second["text"].startswith("Broken but read")
    outcomes = [e.typed(MailProgress).outcome for e in await rig.wait_events(MailProgress.KIND, 2)]
    assert outcomes == ["input", "input"]


async def test_malformed_mime_still_yields_its_text(rig: Rig) -> None:
    await rig.start_inbox()
    rig.imap.append(
        # a multipart that never declares its boundary
        mails.raw(FROM, "Subject: no boundary", "Message-ID: <x1@example.com>", "MIME-Version: 1.0",
                  "Content-Type: multipart/mixed",
                  body=b"--zzz\r\nContent-Type: text/plain\r\n\r\nInside\r\n--zzz--\r\n"),
        # garbage header lines, an unparseable date and a From without angle brackets
        mails.raw(FROM, "Subject: =?utf-8?q?broken=ZZ?=", "Date: not a date", "X-Junk:: ::: \x01",
                  "this is not a header", "Message-ID: <x2@example.com>", body=b"Still here\r\n"),
    )
    first, second = await rig.wait_inputs(2)
    assert "Inside" in first["text"]
    assert "Still here" in second["text"] or "this is not a header" in second["text"]
    assert first["meta"]["message_id"] == "<x1@example.com>"


def _with_attachment(size: int, name: str) -> bytes:
    blob = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    return mails.raw(
        FROM, "Subject: scan", f"Message-ID: <att-{size}@example.com>", "MIME-Version: 1.0",
        'Content-Type: multipart/mixed; boundary="BB"',
        body=b"--BB\r\nContent-Type: text/plain\r\n\r\nThe scan is attached.\r\n"
             b"--BB\r\nContent-Type: application/pdf\r\nContent-Transfer-Encoding: base64\r\n"
             b"Content-Disposition: attachment; filename=\"" + name.encode() + b"\"\r\n\r\n"
             + mails.b64(blob) + b"--BB--\r\n",
    )


async def test_a_5_mb_attachment_is_stored_privately_under_the_limit(rig: Rig) -> None:
    await rig.start_inbox(email_attachment_limit=6 * 1024 * 1024)
    rig.imap.append(_with_attachment(5 * 1024 * 1024, "../../etc/passwd scan.pdf"))
    (item,) = await rig.wait_inputs(1, timeout=40)
    assert item["text"] == "The scan is attached."
    (att,) = item["meta"]["attachments"]
    assert att["stored"] is True and att["size"] == 5 * 1024 * 1024 and att["content_type"] == "application/pdf"
    assert att["name"] == "../../etc/passwd scan.pdf"  # listed as sent, stored under a safe name
    path = Path(rig.system.runtime) / att["path"]
    assert att["path"].startswith("media/email/") and ".." not in att["path"]
    assert path.read_bytes()[:16] == b"0123456789abcdef" and path.stat().st_size == 5 * 1024 * 1024
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    for directory in (path.parent, path.parent.parent, path.parent.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert not [p for p in os.listdir(path.parent) if p.endswith(".tmp")]


async def test_a_5_mb_attachment_over_the_limit_is_listed_but_not_stored(rig: Rig) -> None:
    await rig.start_inbox(email_attachment_limit=1024 * 1024)
    rig.imap.append(_with_attachment(5 * 1024 * 1024, "big.pdf"))
    (item,) = await rig.wait_inputs(1, timeout=40)
    (att,) = item["meta"]["attachments"]
    assert att == {"name": "big.pdf", "content_type": "application/pdf", "size": 5 * 1024 * 1024,
                   "path": None, "stored": False}
    assert not (Path(rig.system.runtime) / "media").exists()


async def test_mail_over_email_max_bytes_is_refused_unread(rig: Rig) -> None:
    await rig.start_inbox(email_max_bytes=1024 * 1024)
    rig.imap.append(
        _with_attachment(2 * 1024 * 1024, "huge.bin"), mails.plain("after it", message_id="<n@example.com>")
    )
    refused = (await rig.wait_events("inbound.refused", 1))[0]
    assert refused.payload["reason"] == "unreadable" and "EMAIL_MAX_BYTES" in refused.payload["detail"]
    assert refused.payload["sender"] == OWNER
    (item,) = await rig.wait_inputs(1)
    assert item["text"] == "after it"  # the next message is not held up


def test_attachment_names_cannot_escape_or_hide() -> None:
    assert safe_filename("../../etc/passwd", 0) == "passwd"
    assert safe_filename("a..b", 0) == "a.b"
    assert safe_filename("..", 3) == "attachment-3"
    assert "/" not in safe_filename("a/b\\c\x00d", 0) and "\x00" not in safe_filename("a/b\\c\x00d", 0)
    assert len(safe_filename("x" * 1000 + ".pdf", 0)) <= 120


def test_text_for_the_agent_is_capped() -> None:
    parsed = mime.parse(mails.plain("word " * 40_000))
    assert len(parsed.text) == mime.TEXT_LIMIT


async def test_references_fall_back_to_a_single_in_reply_to(rig: Rig) -> None:
    # RFC 5322 §3.6.4: a parent without References but with a one-id In-Reply-To gives the
    # reply "References: <its In-Reply-To> <its Message-ID>"
    await rig.start_inbox()
    rig.imap.append(
        mails.plain("only in-reply-to", message_id="<p1@example.com>", headers={"In-Reply-To": "<root@example.com>"}),
        mails.plain("both", message_id="<p2@example.com>",
                    headers={"In-Reply-To": "<b@example.com>", "References": "<a@example.com> <b@example.com>"}),
        mails.plain("two parents", message_id="<p3@example.com>",
                    headers={"In-Reply-To": "<x@example.com> <y@example.com>"}),
    )
    inputs = await rig.wait_inputs(3)
    assert [i["meta"]["references"] for i in inputs] == [
        ["<root@example.com>"], ["<a@example.com>", "<b@example.com>"], [],
    ]


def test_thread_ids_prefer_references() -> None:
    assert mime.thread_ids("<a@x> <b@x>", "<b@x>") == ["<a@x>", "<b@x>"]
    assert mime.thread_ids("", "<b@x>") == ["<b@x>"]
    assert mime.thread_ids("", "") == [] and mime.thread_ids("", "<b@x> <c@x>") == []
