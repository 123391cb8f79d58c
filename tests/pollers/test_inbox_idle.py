"""IDLE: mail appended while the inbox idles arrives at once, not at the next poll."""

import time

import pytest

from tests.pollers import mails
from tests.pollers.conftest import Rig

pytestmark = pytest.mark.integration


async def test_mail_arrives_during_idle_without_waiting_for_the_poll(rig: Rig) -> None:
    health = await rig.start_inbox(imap_poll_s=600, imap_idle_s=600)

    async def idling() -> bool:
        return health.imap.state == "idle"

    await rig.until("the inbox idling", idling)
    appended = time.monotonic()
    rig.imap.append(mails.plain("are you there?"))
    (item,) = await rig.wait_inputs(1, timeout=10)
    assert item["text"] == "are you there?"
    assert time.monotonic() - appended < 10  # the poll would have taken 600 s
    await rig.until("the inbox idling again", idling)
    rig.imap.append(mails.plain("and again"))
    await rig.wait_inputs(2, timeout=10)
