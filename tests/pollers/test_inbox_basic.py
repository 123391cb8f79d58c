"""An owner's plain mail becomes one agent input carrying its headers; progress is recorded."""

import pytest

from delegate.contracts.events import MailProgress
from tests.pollers import mails
from tests.pollers.conftest import Rig

pytestmark = pytest.mark.integration


async def test_a_plain_owner_mail_becomes_one_agent_input_with_its_headers(rig: Rig) -> None:
    await rig.start_inbox()
    rig.imap.append(
        mails.plain(
            "Please book the dentist for Tuesday.\n\n-- \nOwner\nSent from my phone",
            subject="Dentist", message_id="<m1@example.com>",
            headers={"References": "<a@example.com> <b@example.com>", "In-Reply-To": "<b@example.com>"},
        )
    )
    (item,) = await rig.wait_inputs(1)
    assert item["channel"] == "email"
    assert item["client_msg_id"].startswith("email:") and len(item["client_msg_id"]) == len("email:") + 40
    assert item["text"] == "Please book the dentist for Tuesday."  # the signature trimmed
    meta = item["meta"]
    assert meta["from"] == mails.OWNER
    assert meta["subject"] == "Dentist"
    assert meta["message_id"] == "<m1@example.com>"
    assert meta["in_reply_to"] == "<b@example.com>"
    assert meta["references"] == ["<a@example.com>", "<b@example.com>"]
    assert meta["attachments"] == []
    assert "owner" in meta["auth"]

    (progress,) = await rig.wait_events(MailProgress.KIND, 1)
    mark = progress.typed(MailProgress)
    assert (mark.mailbox, mark.uid, mark.outcome, mark.event_id) == ("INBOX", 101, "input", item["id"])
    assert mark.uidvalidity == rig.imap.uidvalidity()
    health = rig.health
    assert health is not None

    async def idling() -> bool:
        return health.imap.state == "idle" and health.last_poll_at is not None

    await rig.until("the inbox idling after the sync", idling)


async def test_a_first_start_with_imap_start_new_leaves_the_mail_already_there_alone(rig: Rig) -> None:
    rig.imap.append(mails.plain("An old mail from last year.", subject="Old", message_id="<old@example.com>"))
    await rig.start_inbox(imap_start="new")
    (baseline,) = await rig.wait_events(MailProgress.KIND, 1)
    assert baseline.typed(MailProgress).outcome == "baseline" and baseline.typed(MailProgress).uid == 101
    rig.imap.append(mails.plain("A new one.", subject="New", message_id="<new@example.com>"))
    (item,) = await rig.wait_inputs(1)
    assert item["meta"]["subject"] == "New"
    marks = [e.typed(MailProgress) for e in await rig.wait_events(MailProgress.KIND, 2)]
    assert [(m.uid, m.outcome) for m in marks] == [(101, "baseline"), (102, "input")]
