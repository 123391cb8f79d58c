"""MediaFetch -> one MMS media item downloaded into RUNTIME_DATA_DIR/media/sms/<MessageSid>/.

Twilio's media URLs need the account's Basic auth and redirect to a CDN on another host: the
credentials go to the Twilio API host only (httpx drops Authorization on a redirect to
another origin), and a URL on any other host is refused rather than handed the account's
secret. The body is streamed with a byte limit, into a temporary file renamed into place,
so a half-downloaded or oversized item never appears. Every outcome, stored or not, is one
``attachment.stored`` event with the id ``att:<MessageSid>:<index>``.
"""

import asyncio
import logging
import mimetypes
import os
import re
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from nats.aio.msg import Msg

from delegate.contracts.channels import MediaFetch
from delegate.contracts.events import AttachmentStored, make_event
from delegate.runtime.retry import Backoff, sleep_unless

from .deliveries import DeliveryLog, redelivered
from .settings import Settings
from .sms_sender import Stopping

log = logging.getLogger(__name__)

TWILIO_API_HOST = "api.twilio.com"
_SID = re.compile(r"^[A-Za-z0-9]{1,64}$")
_TYPE = re.compile(r"^[a-z0-9][a-z0-9!#$&^_.+-]*/[a-z0-9][a-z0-9!#$&^_.+-]*$")
_EXTENSIONS = {"image/jpeg": "jpg", "audio/mpeg": "mp3", "text/plain": "txt", "text/vcard": "vcf"}


class _Refused(Exception):
    """Not stored, for good: too big, not found, not a Twilio URL."""


class _Transient(Exception):
    pass


def attachment_id(message_sid: str, index: int) -> str:
    return f"att:{message_sid}:{index}"


def extension(content_type: str) -> str:
    kind = content_type.split(";")[0].strip().lower()
    if kind in _EXTENSIONS:
        return _EXTENSIONS[kind]
    guessed = mimetypes.guess_extension(kind) if _TYPE.match(kind) else None
    return guessed.lstrip(".") if guessed else "bin"


class MediaFetcher:
    def __init__(
        self, settings: Settings, deliveries: DeliveryLog, stop: asyncio.Event, http: httpx.AsyncClient
    ) -> None:
        self.settings, self.deliveries, self.stop, self.http = settings, deliveries, stop, http
        allowed = {TWILIO_API_HOST}
        if settings.twilio_api_base_url:
            allowed.add(urlsplit(settings.twilio_api_base_url).netloc.lower())
        self.allowed_hosts = allowed

    async def handle(self, job: MediaFetch, raw: Msg) -> None:
        if redelivered(raw):
            await self.deliveries.caught_up()
            if await self.deliveries.get(attachment_id(job.message_sid, job.index)) is not None:
                return
        root = Path(self.settings.runtime_data_dir)
        name = f"{job.index}.{extension(job.content_type)}"
        relative = Path("media") / "sms" / job.message_sid / name
        stored = AttachmentStored(name=name, content_type=job.content_type[:255], url=job.url, stored=False)
        try:
            self._check(job)
            size = await self._download(job, root / relative)
            stored = stored.model_copy(update={"stored": True, "size": size, "path": relative.as_posix()})
        except _Refused as exc:
            stored = stored.model_copy(update={"reason": str(exc)[:500]})
        await self.deliveries.append(make_event(
            stored, id=attachment_id(job.message_sid, job.index), conversation_id=None, span_id=None,
            channel="sms", parent_id=job.parent_id,
        ))

    def _check(self, job: MediaFetch) -> None:
        if not _SID.match(job.message_sid):
            raise _Refused("the message SID is not a Twilio SID")
        parts = urlsplit(job.url)
        if parts.scheme not in ("https", "http") or parts.netloc.lower() not in self.allowed_hosts:
            raise _Refused("not a Twilio media URL")
        if not (self.settings.twilio_account_sid and self.settings.twilio_auth_token):
            raise _Refused("SMS is not configured (TWILIO_*): the media cannot be fetched")

    async def _download(self, job: MediaFetch, target: Path) -> int:
        backoff = Backoff(initial=self.settings.outbox_backoff_s, maximum=self.settings.outbox_backoff_max_s)
        for tried in range(1, self.settings.outbox_attempts + 1):
            try:
                return await self._fetch_once(job, target)
            except _Transient as exc:
                log.warning("media %s/%d try %d failed: %s", job.message_sid, job.index, tried, exc)
                if tried == self.settings.outbox_attempts:
                    raise _Refused(f"download failed after {tried} tries: {exc}") from exc
                if not await sleep_unless(self.stop, backoff.next_delay()):
                    raise Stopping("stopping between tries") from None
        raise AssertionError("unreachable: the last try returns or raises")

    async def _fetch_once(self, job: MediaFetch, target: Path) -> int:
        limit = self.settings.mms_media_limit
        auth = (self.settings.twilio_account_sid or "", self.settings.twilio_auth_token or "")
        directory = target.parent
        tmp = directory / f".{target.name}.{os.getpid()}.tmp"
        try:
            async with self.http.stream("GET", job.url, auth=auth, follow_redirects=True) as response:
                if response.status_code >= 500 or response.status_code == 429:
                    raise _Transient(f"HTTP {response.status_code}")
                if response.status_code != 200:
                    raise _Refused(f"the media URL answered HTTP {response.status_code}")
                declared = response.headers.get("Content-Length")
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise _Refused(f"too big: {declared} bytes, the limit is {limit}")
                _make_dirs(Path(self.settings.runtime_data_dir), directory)
                size = 0
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as out:
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > limit:
                            raise _Refused(f"too big: more than {limit} bytes")
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, target)
                return size
        except httpx.HTTPError as exc:
            raise _Transient(repr(exc)) from exc
        finally:
            tmp.unlink(missing_ok=True)


def _make_dirs(root: Path, directory: Path) -> None:
    """Every directory from ``root`` down to ``directory`` exists with mode 0700."""
    current = root
    root.mkdir(parents=True, exist_ok=True)
    for part in directory.relative_to(root).parts:
        current = current / part
        current.mkdir(mode=0o700, exist_ok=True)
        os.chmod(current, 0o700)
