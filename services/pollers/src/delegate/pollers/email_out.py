"""OutboundEmail -> SMTP to the owner, threaded onto the mail it answers.

The Message-ID is derived from the outbox id, so the owner's client threads a reply to it and
the ``sent`` record names it. SMTP offers no way to ask whether an earlier transaction
arrived, so a redelivered message whose ``sending`` has no result is recorded ``unknown``
and never sent again: the timeline says it may not have arrived, rather than the owner
getting it twice. Inside one process a try is repeated only when it certainly did not
deliver (no connection, a 4xx); a connection lost during DATA is ``unknown`` as well.

Mail with 8-bit text goes out with ``BODY=8BITMIME`` (RFC 6152) to servers that offer it,
and quoted-printable (7-bit) to any that does not. With SMTP_OAUTH2_* / MAIL_OAUTH2_* set the
sender logs in with XOAUTH2; a refused access token is refreshed and tried once more.

The HTML part is the text rendered as CommonMark by markdown-it-py (already pinned, with
raw HTML off, so anything in the text that looks like markup is shown escaped, and its
default link validation drops javascript: and data: links).
"""

import asyncio
import email.policy
import functools
import hashlib
import logging
import re
from email.message import EmailMessage
from email.utils import formatdate, parseaddr
from typing import TYPE_CHECKING

import aiosmtplib
from nats.aio.msg import Msg

from delegate.contracts.channels import OutboundEmail
from delegate.runtime.retry import Backoff, sleep_unless

from . import mail_oauth
from .deliveries import DeliveryLog, redelivered
from .health import Health
from .settings import Settings
from .sms_sender import Stopping

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

log = logging.getLogger(__name__)

NOT_CONFIGURED = "Email is not configured (SMTP_HOST / OWNER_EMAIL)"
UNKNOWN_AFTER_RESTART = (
    "the sender stopped during an earlier attempt; SMTP cannot tell whether that one arrived, "
    "so it was not sent again"
)
PROBE_EVERY_S = 300.0
_REPLY_PREFIX = re.compile(r"^(?:\s*(?:re|aw|sv)\s*:\s*)+", re.IGNORECASE)
_MSG_ID = re.compile(r"^<[^<>\s@]+@[^<>\s@]+>$")
_ID_SAFE = re.compile(r"^[A-Za-z0-9._-]+$")


@functools.cache
def _markdown() -> "MarkdownIt":
    """The CommonMark renderer, made with the first email: markdown-it-py (~30-50 ms of CPU to
    import) is not part of the pollers' start."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False})


def reply_subject(subject: str) -> str:
    """One header line, and one ``Re:`` however many the subject already carried."""
    flat = " ".join(subject.split())
    if _REPLY_PREFIX.match(flat):
        return "Re: " + _REPLY_PREFIX.sub("", flat)
    return flat


def sender_address(settings: Settings) -> str:
    return parseaddr(settings.smtp_sender)[1] or settings.smtp_sender


def message_id(outbox_id: str, settings: Settings) -> str:
    """``<outbox id@sender domain>``; an id with characters a Message-ID cannot hold is hashed."""
    local = outbox_id if _ID_SAFE.match(outbox_id) else "o" + hashlib.sha256(outbox_id.encode()).hexdigest()[:40]
    domain = sender_address(settings).rpartition("@")[2] or settings.smtp_host or "localhost"
    domain = re.sub(r"[^A-Za-z0-9.-]", "", domain) or "localhost"
    return f"<{local}@{domain}>"


def _msg_ids(values: list[str]) -> list[str]:
    """Only well-formed ``<id@domain>`` values: a header cannot be smuggled in through them."""
    found: list[str] = []
    for value in values:
        value = value.strip()
        if not value.startswith("<"):
            value = f"<{value}>"
        if _MSG_ID.match(value) and value not in found:
            found.append(value)
    return found


def to_html(text: str) -> str:
    return f"<!DOCTYPE html>\n<html><body>\n{_markdown().render(text)}</body></html>\n"


def build_email(msg: OutboundEmail, settings: Settings) -> EmailMessage:
    mail = EmailMessage()
    mail["From"] = settings.smtp_sender
    mail["To"] = settings.owner_email or ""
    mail["Subject"] = reply_subject(msg.subject)
    mail["Date"] = formatdate(usegmt=True)  # the email policy renders it as "+0000", RFC 5322's UTC
    mail["Message-ID"] = message_id(msg.id, settings)
    parent = _msg_ids([msg.in_reply_to]) if msg.in_reply_to else []
    references = _msg_ids([*msg.references, *parent])
    if parent:
        mail["In-Reply-To"] = parent[0]
    if references:
        mail["References"] = " ".join(references[-50:])  # the thread's newest, if it grew long
    mail.set_content(msg.text)
    mail.add_alternative(to_html(msg.text), subtype="html")
    return mail


class _Retry(Exception):
    def __init__(self, error: str, code: str | None = None) -> None:
        super().__init__(error)
        self.error, self.code = error, code


class _Done(Exception):
    """The try ended the sender's part: ``status`` failed (5xx) or unknown (lost during DATA)."""

    def __init__(self, status: str, error: str, code: str | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.code = status, error, code


def seven_bit(mail: EmailMessage) -> EmailMessage:
    """The same message with its text parts quoted-printable: for a server without 8BITMIME."""
    for part in mail.walk():
        if part.get_content_maintype() == "text" and part["Content-Transfer-Encoding"] == "8bit":
            part.set_content(part.get_content(), subtype=part.get_content_subtype(), cte="quoted-printable")
    return mail


def eight_bit(data: bytes) -> bool:
    return any(byte > 127 for byte in data)


def smtp_client(settings: Settings) -> aiosmtplib.SMTP:
    oauth = mail_oauth.credentials(settings, "smtp") is not None  # XOAUTH2 after connecting instead
    return aiosmtplib.SMTP(
        hostname=settings.smtp_host,
        port=settings.smtp_port_or_default,
        username=(settings.smtp_user or None) if not oauth else None,
        password=(settings.smtp_password or None) if not oauth else None,
        use_tls=settings.smtp_tls == "ssl",
        start_tls=settings.smtp_tls == "starttls",  # "none": never upgrade, even when offered
        timeout=settings.outbox_http_timeout_s,
    )


class EmailSender:
    def __init__(self, settings: Settings, deliveries: DeliveryLog, health: Health, stop: asyncio.Event) -> None:
        self.settings, self.deliveries, self.health, self.stop = settings, deliveries, health, stop

    @property
    def configured(self) -> bool:
        return self.settings.smtp_enabled and bool(self.settings.owner_email)

    async def handle(self, msg: OutboundEmail, raw: Msg) -> None:
        again = redelivered(raw)
        if again:
            await self.deliveries.caught_up()
            if await self.deliveries.outcome(msg.id) is not None:
                return
        if not self.configured:
            await self.deliveries.record(msg, "failed", error=NOT_CONFIGURED, final=True)
            return
        earlier = await self.deliveries.attempts(msg.id) if again else []
        if earlier:
            await self.deliveries.record(msg, "unknown", attempt=len(earlier), error=UNKNOWN_AFTER_RESTART, final=True)
            return
        mail = build_email(msg, self.settings)
        mid = str(mail["Message-ID"])
        backoff = Backoff(initial=self.settings.outbox_backoff_s, maximum=self.settings.outbox_backoff_max_s)
        for attempt in range(1, self.settings.outbox_attempts + 1):
            await self.deliveries.record(msg, "sending", attempt=attempt)
            try:
                await self._send(mail)
            except _Done as exc:
                if exc.status == "failed":
                    self.health.smtp.failing(exc.error)
                await self.deliveries.record(msg, "failed" if exc.status == "failed" else "unknown", attempt=attempt,
                                             external_ids=[mid], error=exc.error, error_code=exc.code, final=True)
                return
            except _Retry as exc:
                log.warning("email %s attempt %d failed: %s", msg.id, attempt, exc.error)
                self.health.smtp.failing(exc.error)
                if attempt == self.settings.outbox_attempts:
                    await self.deliveries.record(msg, "failed", attempt=attempt, error_code=exc.code, final=True,
                                                 error=f"gave up after {attempt} attempts: {exc.error}")
                    return
                if not await sleep_unless(self.stop, backoff.next_delay()):
                    raise Stopping("stopping between attempts") from None
                continue
            self.health.smtp.ok("reachable", f"sent {mid}")
            await self.deliveries.record(msg, "sent", attempt=attempt, external_ids=[mid], final=True)
            return

    async def _connect(self) -> aiosmtplib.SMTP:
        """Connected and logged in (a password, or XOAUTH2)."""
        smtp = smtp_client(self.settings)
        try:
            await smtp.connect()
            if smtp.is_ehlo_or_helo_needed:  # connect() greets only to log in: the extensions are needed now
                try:
                    await smtp.ehlo()
                except aiosmtplib.SMTPHeloError:
                    await smtp.helo()
            tokens = mail_oauth.tokens(self.settings, "smtp")
            if tokens is not None:
                await self._xoauth2(smtp, tokens)
        except mail_oauth.MailOAuthError as exc:
            smtp.close()
            if exc.final:
                raise _Done("failed", f"SMTP OAuth2: {exc}") from exc
            raise _Retry(f"SMTP OAuth2: {exc}") from exc
        except aiosmtplib.SMTPResponseException as exc:  # a refused greeting, EHLO, STARTTLS or login
            smtp.close()
            raise self._refused(exc) from exc
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            smtp.close()
            raise _Retry(f"could not connect to the SMTP server: {exc!r}") from exc
        return smtp

    async def _xoauth2(self, smtp: aiosmtplib.SMTP, tokens: mail_oauth.AccessTokens) -> None:
        token = await tokens.current()
        try:
            await smtp.auth_xoauth2(self.settings.smtp_user, token)
        except aiosmtplib.SMTPAuthenticationError as exc:
            log.info("SMTP refused the access token (%s %s): refreshing it", exc.code, exc.message)
            await smtp.auth_xoauth2(self.settings.smtp_user, await tokens.after_rejection(token))

    async def _send(self, mail: EmailMessage) -> None:
        smtp = await self._connect()
        data = mail.as_bytes(policy=email.policy.SMTP)
        options: list[str] = []
        if eight_bit(data):
            if smtp.supports_extension("8bitmime"):
                options.append("BODY=8BITMIME")
            else:
                data = seven_bit(mail).as_bytes(policy=email.policy.SMTP)
        try:
            try:
                await smtp.mail(sender_address(self.settings), options=options)
                await smtp.rcpt(self.settings.owner_email or "")
            except aiosmtplib.SMTPResponseException as exc:
                raise self._refused(exc) from exc
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
                raise _Retry(f"the SMTP server dropped the connection before the message: {exc!r}") from exc
            try:
                await smtp.data(data)
            except aiosmtplib.SMTPResponseException as exc:
                raise self._refused(exc) from exc
            except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
                raise _Done("unknown", f"the connection was lost while the message was being sent: {exc!r}") from exc
        finally:
            try:
                await smtp.quit()
            except (aiosmtplib.SMTPException, OSError, TimeoutError):
                smtp.close()

    @staticmethod
    def _refused(exc: aiosmtplib.SMTPResponseException) -> Exception:
        error = f"the SMTP server answered {exc.code}: {exc.message}"
        if 400 <= exc.code < 500:
            return _Retry(error, str(exc.code))
        return _Done("failed", error, str(exc.code))

    async def probe(self) -> None:
        """Connect, EHLO (and STARTTLS/login as configured), QUIT: is the server usable now?"""
        try:
            smtp = await self._connect()
        except (_Retry, _Done) as exc:
            self.health.smtp.failing(f"SMTP probe failed: {exc}")
            return
        try:
            await smtp.noop()
            self.health.smtp.ok("reachable", f"{self.settings.smtp_host}:{self.settings.smtp_port_or_default}")
        except (aiosmtplib.SMTPException, OSError, TimeoutError) as exc:
            self.health.smtp.failing(f"SMTP probe failed: {exc!r}")
        finally:
            try:
                await smtp.quit()
            except (aiosmtplib.SMTPException, OSError, TimeoutError):
                smtp.close()

    async def probe_forever(self) -> None:
        while not self.stop.is_set():
            await self.probe()
            if not await sleep_unless(self.stop, PROBE_EVERY_S):
                return
