"""MMS media downloads from the Twilio stand-in: authenticated, redirected to a CDN without
the credentials, size-limited, stored privately and atomically, every outcome recorded."""

import os
import stat
from pathlib import Path

import pytest

from delegate.contracts.channels import MediaFetch
from tests.pollers.outbox_fixtures import OutboxRig, outbox_fixture, smtp_fixture, twilio_fixture  # noqa: F401

pytestmark = pytest.mark.integration

SID = "MM" + "a1" * 16


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


async def test_a_picture_is_downloaded_with_auth_through_the_redirect_and_stored_privately(outbox: OutboxRig) -> None:
    await outbox.start()
    picture = os.urandom(200_000)
    url = outbox.twilio.add_media("pic1", picture, "image/jpeg", redirect=True)
    await outbox.send(MediaFetch(parent_id="user-1", message_sid=SID, index=0, url=url, content_type="image/jpeg"))

    async def recorded() -> bool:
        return bool(await outbox.events("attachment.stored"))

    await outbox.until("the attachment record", recorded)
    (event,) = await outbox.events("attachment.stored")
    assert event.id == f"att:{SID}:0" and event.parent_id == "user-1" and event.channel == "sms"
    assert event.payload["stored"] is True and event.payload["size"] == len(picture)
    assert event.payload["path"] == f"media/sms/{SID}/0.jpg"

    stored = outbox.system.runtime / event.payload["path"]
    assert stored.read_bytes() == picture
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    for directory in (stored.parent, stored.parent.parent, stored.parent.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert _files(outbox.system.runtime / "media") == [stored]  # no temporary file left
    fetched = [r for r in outbox.twilio.requests if r.path == "/media/pic1"]
    assert fetched and fetched[0].headers.get("Authorization", "").startswith("Basic ")
    assert [r.path for r in outbox.twilio.requests if r.path.startswith("/cdn/")] == ["/cdn/pic1"]
    assert outbox.twilio.cdn_auth_seen == []  # the credentials stayed with the Twilio host


async def test_a_6_mb_item_is_refused_as_too_big_and_nothing_is_left_on_disk(outbox: OutboxRig) -> None:
    await outbox.start()
    url = outbox.twilio.add_media("video", b"\0" * (6 * 1024 * 1024), "video/mp4")
    small = outbox.twilio.add_media("note", b"see you at 5", "text/plain")
    await outbox.send(MediaFetch(parent_id="user-2", message_sid=SID, index=0, url=url, content_type="video/mp4"))
    await outbox.send(MediaFetch(parent_id="user-2", message_sid=SID, index=1, url=small, content_type="text/plain"))

    async def both() -> bool:
        return len(await outbox.events("attachment.stored")) == 2

    await outbox.until("both attachment records", both)
    big, note = sorted(await outbox.events("attachment.stored"), key=lambda e: e.id)
    assert big.id == f"att:{SID}:0" and big.payload["stored"] is False
    assert "too big" in big.payload["reason"] and big.payload["path"] is None
    assert note.payload["stored"] is True and note.payload["path"] == f"media/sms/{SID}/1.txt"
    assert _files(outbox.system.runtime / "media") == [outbox.system.runtime / note.payload["path"]]


async def test_a_body_over_the_limit_without_a_length_is_cut_off_while_streaming(outbox: OutboxRig) -> None:
    # the limit holds when the size is known only once it is exceeded (no trusting the header)
    await outbox.start(mms_media_limit=1000)
    url = outbox.twilio.add_media("chunk", b"x" * 5000, "image/png")
    await outbox.send(MediaFetch(parent_id="user-3", message_sid=SID, index=2, url=url, content_type="image/png"))

    async def recorded() -> bool:
        return bool(await outbox.events("attachment.stored"))

    await outbox.until("the attachment record", recorded)
    (event,) = await outbox.events("attachment.stored")
    assert event.payload["stored"] is False and "too big" in event.payload["reason"]
    assert _files(outbox.system.runtime / "media") == []


async def test_hostile_jobs_are_refused_without_sending_the_credentials_or_writing_outside(outbox: OutboxRig) -> None:
    await outbox.start()
    url = outbox.twilio.add_media("pic", b"data", "image/gif")
    elsewhere = url.replace("127.0.0.1", "localhost")  # same server, another host: must not get the secret
    await outbox.send(MediaFetch(parent_id="u", message_sid="../../etc", index=0, url=url, content_type="image/gif"))
    await outbox.send(MediaFetch(parent_id="u", message_sid=SID, index=3, url=elsewhere, content_type="image/gif"))

    async def both() -> bool:
        return len(await outbox.events("attachment.stored")) == 2

    await outbox.until("both attachment records", both)
    reasons = sorted(e.payload["reason"] for e in await outbox.events("attachment.stored"))
    assert reasons == ["not a Twilio media URL", "the message SID is not a Twilio SID"]
    assert [r for r in outbox.twilio.requests if r.path.startswith("/media/")] == []
    assert not (outbox.system.runtime / "media").exists()
    assert not (outbox.system.runtime.parent / "etc").exists()
