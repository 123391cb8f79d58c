"""send_sms_to_owner (Twilio REST, official client) and send_email_to_owner (SMTP, aiosmtplib).

Registered only when their channel is configured. The only recipient is the owner: the model
cannot choose a number or an address.
"""

import asyncio
import socket
from email.message import EmailMessage
from email.utils import formatdate, make_msgid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiosmtplib
from twilio.base.exceptions import TwilioException, TwilioRestException
from twilio.http.http_client import TwilioHttpClient
from twilio.http.response import Response
from twilio.rest import Client as TwilioClient

from ..base import FAILED, UNAVAILABLE, Tool, ToolError, object_schema
from ..settings import ToolSettings

SMS_LIMIT = 1600  # Twilio's maximum body length


class BaseUrlTwilioHttpClient(TwilioHttpClient):  # type: ignore[misc]  # twilio is untyped
    """Sends every request to TWILIO_API_BASE_URL; runs after the client's region/edge rewriting,
    so it works for every Twilio domain (twilio-email-wire.md, section 4)."""

    def __init__(self, base_url: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._base = urlsplit(base_url)

    def request(self, method: str, url: str, *args: Any, **kwargs: Any) -> Response:
        parts = urlsplit(url)
        url = urlunsplit((self._base.scheme, self._base.netloc, parts.path, parts.query, ""))
        return super().request(method, url, *args, **kwargs)


def twilio_client(settings: ToolSettings) -> TwilioClient:
    base = settings.twilio_api_base_url
    http_client = BaseUrlTwilioHttpClient(base, timeout=30) if base else None
    return TwilioClient(settings.twilio_account_sid, settings.twilio_auth_token, http_client=http_client)


def sms_tool(settings: ToolSettings) -> Tool:
    client = twilio_client(settings)

    def send(body: str) -> Any:
        return client.messages.create(to=settings.owner_phone, from_=settings.twilio_phone_number, body=body)

    async def handler(args: dict[str, Any]) -> str:
        try:
            message = await asyncio.to_thread(send, args["text"])
        except TwilioRestException as exc:
            raise ToolError(FAILED, f"Twilio refused the SMS (HTTP {exc.status}, code {exc.code}): {exc.msg}") from exc
        except (TwilioException, OSError) as exc:
            raise ToolError(UNAVAILABLE, f"could not reach Twilio to send the SMS: {exc}") from exc
        return f"SMS sent to the owner (sid {message.sid}, status {message.status})."

    return Tool(
        "send_sms_to_owner",
        "Send a text message (SMS) to the owner's phone. Keep it short.",
        object_schema({"text": {"type": "string", "minLength": 1, "maxLength": SMS_LIMIT}}, ["text"]),
        handler,
        ("local", "owner_contact", "sms"),
    )


def email_tool(settings: ToolSettings) -> Tool:
    tls = settings.smtp_tls
    port = settings.smtp_port or {"ssl": 465, "starttls": 587, "none": 25}[tls]
    sender = settings.smtp_from or settings.smtp_user or f"delegate@{settings.smtp_host}"
    domain = sender.rpartition("@")[2] or socket.getfqdn()

    async def handler(args: dict[str, Any]) -> str:
        msg = EmailMessage()
        msg["From"] = sender
        msg["To"] = settings.owner_email
        msg["Subject"] = args["subject"]
        msg["Date"] = formatdate(usegmt=True)
        msg["Message-ID"] = make_msgid(domain=domain)
        msg.set_content(args["text"])
        try:
            await aiosmtplib.send(
                msg,
                hostname=settings.smtp_host,
                port=port,
                username=settings.smtp_user or None,
                password=settings.smtp_password or None,
                use_tls=tls == "ssl",
                start_tls=tls == "starttls",
                timeout=30,
            )
        except aiosmtplib.SMTPResponseException as exc:
            raise ToolError(FAILED, f"the mail server refused the email ({exc.code} {exc.message})") from exc
        except (aiosmtplib.SMTPException, OSError) as exc:
            raise ToolError(UNAVAILABLE, f"could not reach the mail server {settings.smtp_host}:{port}: {exc}") from exc
        return f"Email sent to the owner (Message-ID {msg['Message-ID']})."

    return Tool(
        "send_email_to_owner",
        "Send an email to the owner.",
        object_schema(
            {"subject": {"type": "string", "minLength": 1, "maxLength": 300},
             "text": {"type": "string", "minLength": 1, "maxLength": 100_000}},
            ["subject", "text"],
        ),
        handler,
        ("local", "owner_contact", "email"),
    )
