"""One raw RFC 5322 message -> what the agent and the sender check need; never raises.

Mail is hostile input: every header and part is read in its own try/except, any charset
(declared, unknown or lying) degrades to replacement characters, and a message whose
structure is broken (a multipart without its boundary, garbage header lines) still yields
its readable text. The parser keeps what it could not read as ``problems`` for the log.

Libraries: html2text turns HTML-only mail into readable text (maintained, keeps links and
lists as Markdown, which a model reads well; inscriptis lays out tables better but drops
link targets). mail-parser-reply trims quoted history and signatures (maintained successor
of GitHub's email_reply_parser, multi-language reply headers).
"""

import codecs
import hashlib
import logging
from dataclasses import dataclass, field
from email import policy
from email.message import EmailMessage, Message
from email.parser import BytesParser
from email.utils import getaddresses

from mailparser_reply import EmailReplyParser

log = logging.getLogger(__name__)

TEXT_LIMIT = 64_000  # UserInput.text's maximum
HEADER_LIMIT = 998  # RFC 5322 line limit; also the contracts' header fields' maximum


@dataclass
class Attachment:
    name: str
    content_type: str
    size: int
    data: bytes


@dataclass
class ParsedMail:
    from_addrs: list[str]  # addr-specs of From (normally one)
    from_raw: str
    subject: str
    message_id: str | None
    in_reply_to: str | None
    references: list[str]  # what a reply's References starts with (see ``thread_ids``)
    date: str
    text: str  # the trimmed body for the agent, capped
    full_text: str  # before trimming (for previews)
    attachments: list[Attachment] = field(default_factory=list)
    auth_results: list[str] = field(default_factory=list)  # raw Authentication-Results values
    problems: list[str] = field(default_factory=list)

    @property
    def sender(self) -> str:
        return self.from_addrs[0] if self.from_addrs else self.from_raw[:HEADER_LIMIT]


def mail_key(message_id: str | None, date: str, sender: str, subject: str, size: int) -> str:
    """The message's stable identity across UIDVALIDITY changes: sha256 of Message-ID, else of
    Date+From+Subject+size, first 40 hex."""
    basis = message_id if message_id else f"{date}\n{sender}\n{subject}\n{size}"
    return hashlib.sha256(basis.encode("utf-8", "replace")).hexdigest()[:40]


def _header(msg: Message, name: str, problems: list[str]) -> str:
    try:
        value = msg.get(name)
        return "" if value is None else " ".join(str(value).split())
    except Exception as exc:  # a header policy.default cannot parse: fall back to its raw text
        problems.append(f"header {name}: {exc!r}")
        for key, raw in msg.raw_items():
            if key.lower() == name.lower():
                return " ".join(str(raw).split())
        return ""


def _all_headers(msg: Message, name: str, problems: list[str]) -> list[str]:
    out: list[str] = []
    try:
        for key, raw in msg.raw_items():
            if key.lower() == name.lower():
                out.append(" ".join(str(raw).split()))
    except Exception as exc:
        problems.append(f"headers {name}: {exc!r}")
    return out


def _ids(value: str) -> list[str]:
    return [part if part.startswith("<") else f"<{part.strip('<>')}>" for part in value.split() if part.strip("<>")]


def thread_ids(references: str, in_reply_to: str) -> list[str]:
    """The parent's References; without them, its In-Reply-To when that names a single
    message (RFC 5322 §3.6.4): a reply's References are these followed by the parent's id."""
    found = _ids(references)
    if not found:
        parent = _ids(in_reply_to)
        found = parent if len(parent) == 1 else []
    return [r[:HEADER_LIMIT] for r in found][-50:]


def _decode(payload: bytes, charset: str | None) -> str:
    name = charset or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        name = "utf-8"  # an unknown charset: read as UTF-8 and let broken bytes become U+FFFD
    try:
        return payload.decode(name, errors="replace")
    except Exception:
        return payload.decode("utf-8", errors="replace")


def _part_bytes(part: Message) -> bytes:
    data = part.get_payload(decode=True)
    if isinstance(data, bytes):
        return data
    raw = part.get_payload()
    return raw.encode("utf-8", "replace") if isinstance(raw, str) else b""


def html_to_text(html: str) -> str:
    import html2text  # with the first HTML-only mail, not with the pollers' start (~10 ms of CPU)

    converter = html2text.HTML2Text()
    converter.body_width = 0  # no hard wrapping: the client and the model wrap themselves
    converter.ignore_images = True
    converter.unicode_snob = True
    return converter.handle(html).strip()


def trim_reply(text: str) -> str:
    """The newest reply without quoted history and signature; all of it if trimming empties it."""
    try:
        replies = EmailReplyParser(languages=["en", "de", "fr", "es"]).read(text).replies
        # the first reply is the newest; ``body`` drops its signature and disclaimers too
        trimmed = replies[0].body if replies else ""
    except Exception:
        return text
    return trimmed.strip() if trimmed and trimmed.strip() else text


def _safe_name(part: Message, index: int) -> str:
    try:
        name = part.get_filename()
    except Exception:
        name = None
    return (name or f"part-{index}").strip()[:500] or f"part-{index}"


def parse(raw: bytes) -> ParsedMail:
    problems: list[str] = []
    msg: Message
    try:
        msg = BytesParser(policy=policy.default).parsebytes(raw)
    except Exception as exc:  # practically unreachable: the parser records defects instead
        problems.append(f"unparseable: {exc!r}")
        msg = EmailMessage()
        msg.set_payload(raw.decode("utf-8", "replace"))

    from_raw = _header(msg, "From", problems)
    try:
        from_addrs = [addr.lower() for _, addr in getaddresses([from_raw]) if "@" in addr]
    except Exception as exc:
        problems.append(f"From: {exc!r}")
        from_addrs = []
    subject = _header(msg, "Subject", problems)[:HEADER_LIMIT]
    message_id = _header(msg, "Message-ID", problems)[:HEADER_LIMIT] or None
    in_reply_to = _header(msg, "In-Reply-To", problems)[:HEADER_LIMIT] or None
    references = thread_ids(_header(msg, "References", problems), in_reply_to or "")
    date = _header(msg, "Date", problems)

    plain: list[str] = []
    html: list[str] = []
    attachments: list[Attachment] = []
    for index, part in enumerate(_walk(msg, problems)):
        try:
            ctype = (part.get_content_type() or "text/plain").lower()
            disposition = part.get_content_disposition()
            named = False
            try:
                named = part.get_filename() is not None
            except Exception:
                named = False
            if disposition == "attachment" or (named and not ctype.startswith("text/")) or (
                named and disposition is not None
            ):
                data = _part_bytes(part)
                attachments.append(Attachment(_safe_name(part, index), ctype[:255], len(data), data))
                continue
            if ctype == "text/html":
                html.append(_decode(_part_bytes(part), _charset(part)))
            elif ctype.startswith("text/") or ctype.startswith("multipart/"):
                # a multipart whose boundary is missing arrives here as one opaque text body
                plain.append(_decode(_part_bytes(part), _charset(part)))
            else:
                data = _part_bytes(part)
                attachments.append(Attachment(_safe_name(part, index), ctype[:255], len(data), data))
        except Exception as exc:
            problems.append(f"part {index}: {exc!r}")

    full = "\n\n".join(t.strip() for t in plain if t.strip())
    if not full and html:
        try:
            full = "\n\n".join(html_to_text(h) for h in html if h.strip())
        except Exception as exc:
            problems.append(f"html: {exc!r}")
            full = "\n\n".join(html)
    full = full.replace("\x00", "")
    text = trim_reply(full) if full else ""
    # One keyword a field: the shape of any record built by name (the ledger's ResumeState too), nothing to share.
    return ParsedMail(
        from_addrs=from_addrs,
        from_raw=from_raw,
        subject=subject,
        message_id=message_id,
        in_reply_to=in_reply_to,
        references=references,
        date=date,
        text=text[:TEXT_LIMIT],
        full_text=full,
        attachments=attachments,
        auth_results=_all_headers(msg, "Authentication-Results", problems),
        problems=problems,
    )


def _charset(part: Message) -> str | None:
    try:
        return part.get_content_charset()
    except Exception:
        return None


def _walk(msg: Message, problems: list[str]) -> list[Message]:
    """The leaf parts; a part the walker chokes on ends the walk, not the message."""
    leaves: list[Message] = []
    try:
        for part in msg.walk():
            if not part.is_multipart():
                leaves.append(part)
    except Exception as exc:
        problems.append(f"walk: {exc!r}")
    return leaves
