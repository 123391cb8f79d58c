"""A changed UIDVALIDITY (the mailbox rebuilt: pymap restarted, the same mail re-appended)
re-scans from UID 1 and handles nothing twice."""

import pytest

from delegate.contracts.events import MailProgress
from tests.pollers import mails
from tests.pollers.conftest import Rig

pytestmark = pytest.mark.integration


async def test_a_new_uidvalidity_rescans_without_handling_anything_twice(rig: Rig) -> None:
    old = [mails.plain(f"message {i}", message_id=f"<old-{i}@example.com>") for i in range(3)]
    stranger = mails.plain("hello?", sender="x@elsewhere.example", message_id="<x@elsewhere.example>")
    await rig.start_inbox()
    rig.imap.append(*old, stranger)
    await rig.wait_events(MailProgress.KIND, 4)
    before = rig.imap.uidvalidity()
    await rig.stop_inboxes()

    rig.imap.restart()
    assert rig.imap.uidvalidity() != before
    rig.imap.append(*reversed(old), stranger, mails.plain("brand new", message_id="<new@example.com>"))
    await rig.start_inbox()
    marks = [e.typed(MailProgress) for e in await rig.wait_events(MailProgress.KIND, 9)]
    again = [m for m in marks if m.uidvalidity != before]
    assert [m.outcome for m in again] == ["duplicate"] * 4 + ["input"]
    inputs = await rig.agent_inputs()
    assert [i["text"] for i in inputs] == ["message 0", "message 1", "message 2", "brand new"]
    assert len(await rig.events("inbound.refused")) == 1
