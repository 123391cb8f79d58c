"""Raw test messages, built as bytes so a test can make them as broken as it needs."""

import base64
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid

OWNER = "owner@example.com"


def plain(
    text: str = "Please book the dentist for Tuesday.",
    *,
    sender: str = f"Owner <{OWNER}>",
    subject: str = "Dentist",
    message_id: str | None = None,
    headers: dict[str, str] | None = None,
) -> bytes:
    msg = EmailMessage()
    msg["From"] = sender
    msg["To"] = "delegate@example.com"
    msg["Subject"] = subject
    msg["Date"] = format_datetime(datetime.now(UTC))
    msg["Message-ID"] = message_id or make_msgid(domain="example.com")
    for name, value in (headers or {}).items():
        msg[name] = value
    msg.set_content(text)
    return msg.as_bytes()


def raw(*lines: str, body: bytes = b"") -> bytes:
    """Headers exactly as given (CRLF-joined), then the body bytes."""
    return "\r\n".join(lines).encode("utf-8", "surrogateescape") + b"\r\n\r\n" + body


def b64(data: bytes) -> bytes:
    return base64.encodebytes(data)
