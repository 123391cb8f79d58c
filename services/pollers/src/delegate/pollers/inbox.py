"""The email inbox: new mail by UID -> agent input (the owner's) or ``inbound.refused``.

One routine, ``sync``, handles every message with a UID above the last one recorded; IDLE
(or, on servers without it, a timer) only decides when it runs, and a safety-net poll runs
it at least every IMAP_POLL_S. Progress is read from and written to the ledger (see
``progress``); a changed UIDVALIDITY starts over from UID 1 and the per-message look-ups
skip everything already handled, so nothing is answered twice.
"""

import asyncio
import functools
import logging
import re
import unicodedata
from pathlib import Path
from typing import Any, Literal

from delegate.contracts import topics
from delegate.contracts.events import InboundRefused, MailProgress, make_event
from delegate.contracts.messages import UserInput
from delegate.runtime.bus import Bus, BusUnavailable
from delegate.runtime.known_sender import who
from delegate.runtime.retry import Backoff, sleep_unless

from . import mail_auth, mime
from .health import Health
from .imap_session import ImapError, ImapSession
from .private_files import store_file
from .progress import LedgerUnavailable, Progress
from .settings import Settings

log = logging.getLogger(__name__)

Outcome = Literal["input", "refused", "duplicate", "unreadable"]
_UNSAFE = re.compile(r"[^A-Za-z0-9._ -]+")


def safe_filename(name: str, index: int) -> str:
    """A file name that cannot leave its directory or surprise a shell: no separators, no
    leading dots, no control characters, bounded length."""
    base = re.split(r"[/\\]", unicodedata.normalize("NFKC", name))[-1]  # the last path component only
    base = re.sub(r"\.{2,}", ".", _UNSAFE.sub("_", base)).strip(" .")
    base = base[-120:] if len(base) > 120 else base
    return base or f"attachment-{index}"


class Inbox:
    def __init__(self, bus: Bus, settings: Settings, health: Health, stop: asyncio.Event) -> None:
        self.bus, self.settings, self.health, self.stop = bus, settings, health, stop
        self.progress = Progress(bus)
        self.mailbox = settings.imap_mailbox
        self.uidvalidity: int | None = None
        self.last_uid = 0
        self.handled: set[str] = set()  # event ids of earlier passes, loaded for a re-scan

    async def run(self) -> None:
        """Connect, sync, wait for mail, repeat; reconnect with backoff until ``stop``."""
        self.health.imap.enabled = True
        backoff = Backoff(initial=1.0, maximum=60.0)
        while not self.stop.is_set():
            self.health.imap.state = "connecting"
            session = ImapSession(self.settings)
            try:
                selected = await session.open()
                await self._resume(selected.uidvalidity, session)
                backoff.reset()
                await self._serve(session)
            except (ImapError, LedgerUnavailable, BusUnavailable, TimeoutError, OSError) as exc:
                log.warning("inbox: %s", exc)
                self.health.imap.failing(str(exc))
                if not await backoff.sleep(self.stop):
                    break
            finally:
                await session.close()

    async def _resume(self, uidvalidity: int, session: ImapSession) -> None:
        await self.progress.wait_caught_up()
        stored = await self.progress.newest(self.mailbox)
        if stored is None and self.settings.imap_start == "new":
            stored = await self._baseline(uidvalidity, session)
        if stored is not None and stored.uidvalidity == uidvalidity:
            self.last_uid = stored.uid
        else:
            if stored is not None:
                log.warning("UIDVALIDITY of %s changed (%s -> %s): re-scanning from UID 1, skipping handled mail",
                            self.mailbox, stored.uidvalidity, uidvalidity)
            self.last_uid = 0
        self.handled = await self.progress.handled_event_ids(self.mailbox) if self.last_uid == 0 else set()
        self.uidvalidity = uidvalidity
        log.info("inbox %s: UIDVALIDITY %s, continuing after UID %s", self.mailbox, uidvalidity, self.last_uid)

    async def _baseline(self, uidvalidity: int, session: ImapSession) -> MailProgress:
        """First start with IMAP_START=new: what the mailbox holds now counts as read."""
        existing = await session.sizes_after(0)
        newest = existing[-1][0] if existing else 0
        baseline = MailProgress(mailbox=self.mailbox, uidvalidity=uidvalidity, uid=newest, outcome="baseline")
        await self.progress.record(baseline)
        log.info("inbox %s: first start, %d messages already there are left alone (IMAP_START=new)",
                 self.mailbox, len(existing))
        return baseline

    async def _serve(self, session: ImapSession) -> None:
        idle = session.idle_capable
        while not self.stop.is_set():
            await self.sync(session)
            if idle:
                detail = f"{self.mailbox} after UID {self.last_uid}"
                # renewed every IMAP_IDLE_S, and left at least every IMAP_POLL_S for the safety-net
                # sync (which also catches mail that arrived between the sync and IDLE's start)
                await session.wait_for_mail(
                    min(self.settings.imap_idle_s, self.settings.imap_poll_s), self.stop,
                    on_idle=functools.partial(self.health.imap.ok, "idle", detail),
                )
                self.health.imap.ok("syncing", detail)
            else:
                self.health.imap.ok("polling", f"{self.mailbox} after UID {self.last_uid}")
                if not await sleep_unless(self.stop, self.settings.imap_poll_s):
                    return
                await session.noop()

    async def sync(self, session: ImapSession) -> None:
        """Handle every message above the last recorded UID, in UID order, one at a time."""
        assert self.uidvalidity is not None
        for uid, size in await session.sizes_after(self.last_uid):
            if self.stop.is_set():
                return
            outcome, event_id, message_id = await self._handle(session, uid, size)
            await self.progress.record(
                MailProgress(
                    mailbox=self.mailbox, uidvalidity=self.uidvalidity, uid=uid,
                    message_id=message_id, outcome=outcome, event_id=event_id,
                )
            )
            self.last_uid = uid
        self.health.polled()

    async def _handle(self, session: ImapSession, uid: int, size: int) -> tuple[Outcome, str | None, str | None]:
        oversized = size > self.settings.email_max_bytes
        raw = await session.fetch(uid, "BODY.PEEK[HEADER]" if oversized else "BODY.PEEK[]")
        if raw is None:  # expunged between listing and fetching
            return "unreadable", None, None
        mail = mime.parse(raw)
        if mail.problems:
            log.info("uid %s: parsed with problems: %s", uid, "; ".join(mail.problems)[:1000])
        key = mime.mail_key(mail.message_id, mail.date, mail.from_raw, mail.subject, size)
        client_msg_id, input_id, refused_id = f"email:{key}", f"email-{key}", f"refused:email:{key}"

        done = next((i for i in (input_id, refused_id) if i in self.handled), None)
        done = done or await self.progress.already_handled(client_msg_id, input_id, refused_id)
        if done is not None:
            log.info("uid %s: already handled as %s", uid, done)
            return "duplicate", done, mail.message_id

        verdict = mail_auth.check(
            mail.from_addrs, mail.auth_results, self.settings.owner_email, self.settings.email_authserv_id
        )
        if not verdict.ok:
            await self._refuse(refused_id, mail, verdict.reason, verdict.detail)  # type: ignore[arg-type]
            return "refused", refused_id, mail.message_id
        if oversized:
            detail = f"{size} bytes is over EMAIL_MAX_BYTES ({self.settings.email_max_bytes}); not downloaded"
            await self._refuse(refused_id, mail, "unreadable", detail)
            return "unreadable", refused_id, mail.message_id

        attachments = [self._attachment(key, i, a) for i, a in enumerate(mail.attachments)]
        text = mail.text.strip() or (f"(no text; subject: {mail.subject})" if mail.subject else "(empty email)")
        meta: dict[str, Any] = {
            "from": mail.sender,
            "subject": mail.subject,
            "message_id": mail.message_id,
            "in_reply_to": mail.in_reply_to,
            "references": mail.references,
            "attachments": attachments,
            "auth": verdict.detail,
        }
        user_input = UserInput(
            id=input_id, channel="email", text=text[: mime.TEXT_LIMIT], client_msg_id=client_msg_id, meta=meta
        )
        await self.bus.publish(topics.AGENT_INPUT, user_input, msg_id=client_msg_id)
        log.info("uid %s: owner mail %s -> agent input %s", uid, mail.message_id, input_id)
        return "input", input_id, mail.message_id

    def _attachment(self, key: str, index: int, item: mime.Attachment) -> dict[str, Any]:
        listed: dict[str, Any] = {
            "name": item.name, "content_type": item.content_type, "size": item.size, "path": None, "stored": False,
        }
        if item.size > self.settings.email_attachment_limit:
            return listed
        root = self.settings.runtime_data_dir
        root.mkdir(parents=True, exist_ok=True)
        name = f"{index}-{safe_filename(item.name, index)}"  # the index: two parts may share a name
        try:
            path = store_file(root, Path("media", "email", key), name, item.data)
        except (OSError, ValueError) as exc:
            log.warning("attachment %r not stored: %r", item.name, exc)
            return listed
        listed.update(path=str(path.relative_to(root)), stored=True)
        return listed

    async def _refuse(
        self, refused_id: str, mail: mime.ParsedMail, reason: Literal["not_owner", "unauthenticated", "unreadable"],
        detail: str,
    ) -> None:
        payload = InboundRefused(
            sender=mail.sender[:998] or "(unknown)",
            reason=reason,
            detail=detail[:2000],
            external_id=mail.message_id,
            subject=mail.subject[:998] or None,
            preview=" ".join(mail.full_text.split())[:500],
            # named on the timeline when memory knows the address; refused all the same
            **(await who(self.bus, email=mail.sender) if reason == "not_owner" else {}),
        )
        event = make_event(payload, id=refused_id, conversation_id=None, span_id=None, channel="email")
        await self.progress.append(event)
        log.info("refused mail from %s (%s): %s", payload.sender, reason, detail)


async def run_inbox(bus: Bus, settings: Settings, health: Health, stop: asyncio.Event) -> None:
    await Inbox(bus, settings, health, stop).run()
