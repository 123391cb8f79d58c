"""The real pollers process: ready only when it works, and a SIGKILL in the middle of a
mailbox loses nothing and duplicates nothing."""

import collections

import pytest

from delegate.contracts import topics
from delegate.contracts.channels import ChannelsState, ChannelsStateRequest
from delegate.contracts.events import MailProgress
from tests.pollers import mails
from tests.pollers.conftest import OWNER, Rig

pytestmark = pytest.mark.integration


def _start_pollers(rig: Rig, **env: str) -> None:
    rig.system.extra_env.update(rig.imap.env(OWNER_EMAIL=OWNER, IMAP_POLL_S="0.5", **env))
    rig.system.start_one("pollers")


async def test_sigkill_mid_mailbox_then_restart_yields_every_message_exactly_once(rig: Rig) -> None:
    # bulky messages (a stored attachment each) keep the pollers busy long enough to be killed mid-way
    blob = mails.b64(b"x" * 300_000)
    total = 30
    rig.imap.append(*[
        mails.raw(f"From: {OWNER}", f"Subject: n{i}", f"Message-ID: <bulk-{i}@example.com>", "MIME-Version: 1.0",
                  'Content-Type: multipart/mixed; boundary="B"',
                  body=f"--B\r\nContent-Type: text/plain\r\n\r\nnumber {i}\r\n".encode()
                  + b"--B\r\nContent-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n"
                  b"Content-Disposition: attachment; filename=\"a.bin\"\r\n\r\n" + blob + b"--B--\r\n")
        for i in range(total)
    ])
    _start_pollers(rig)
    await rig.wait_events(MailProgress.KIND, 3, timeout=30)
    rig.system.kill("pollers")  # SIGKILL: no shutdown, mid-fetch or mid-publish
    at_kill = len(await rig.events(MailProgress.KIND))
    assert at_kill < total, "the pollers finished before the kill; the test proves nothing"

    rig.system.procs["pollers"].start()
    marks = [e.typed(MailProgress) for e in await rig.wait_events(MailProgress.KIND, total, timeout=60)]
    per_uid = collections.Counter(m.uid for m in marks)
    assert sorted(per_uid) == list(range(101, 101 + total)) and set(per_uid.values()) == {1}

    inputs = await rig.agent_inputs()
    by_id = collections.Counter(i["client_msg_id"] for i in inputs)
    assert len(inputs) == total and len(by_id) == total  # one input per message in the AGENT stream
    assert sorted(i["text"] for i in inputs) == sorted(f"number {i}" for i in range(total))
    assert {m.event_id for m in marks} == {i["id"] for i in inputs}


async def test_pollers_state_reports_imap_and_a_dead_imap_server_is_failing(rig: Rig) -> None:
    _start_pollers(rig)
    rig.system.wait_ready(["pollers"], timeout=30)  # outbox consumers running and IMAP connected

    async def state() -> ChannelsState:
        return await rig.bus.request(topics.POLLERS_STATE, ChannelsStateRequest(), timeout=2)

    async def idling() -> bool:
        return (await state()).imap.state == "idle"

    await rig.until("the pollers idling", idling)
    rig.imap.stop()

    async def failing() -> bool:
        now = await state()
        return now.imap.state in ("failing", "connecting") and not (await rig.bus.ping("pollers")).ready

    await rig.until("the pollers to notice IMAP is gone", failing, timeout=30)
    rig.imap.start()

    async def back() -> bool:
        return (await state()).imap.state == "idle" and (await rig.bus.ping("pollers")).ready

    await rig.until("IMAP back", back, timeout=60)
    rig.imap.append(mails.plain("after the outage"))
    (item,) = await rig.wait_inputs(1)
    assert item["text"] == "after the outage"


async def test_starttls_is_refused_at_startup_with_the_alternatives(rig: Rig) -> None:
    _start_pollers(rig, IMAP_TLS="starttls")
    proc = rig.system.procs["pollers"]

    async def exited() -> bool:
        return not proc.alive()

    await rig.until("the pollers to refuse starting", exited, timeout=30)
    assert proc.proc is not None and proc.proc.returncode != 0
    log = proc.log_text()
    assert "IMAP_TLS=starttls is not supported" in log and "IMAP_TLS=ssl" in log and "IMAP_TLS=none" in log
