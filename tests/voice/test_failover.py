"""A voice process killed mid-call: its successor closes the call it left open (voice_lost)."""

import asyncio
import time
from collections.abc import Callable
from typing import Any

from delegate.contracts.voice import TranscriptOut
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.voice.peer import Caller, events_until, ledger_events, wait_for


async def test_sigkill_mid_call_then_the_next_prepare_closes_the_stale_call(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", fresh=True, VOICE_LOCK_TTL_S="2")  # its voice is killed
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "remember the blue door", "answer": "I will remember the blue door."})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await wait_for(lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer")
    # what was said is in the ledger as it happens, before any end
    await wait_for_messages(bus, caller.session_id, 2)
    old_session = caller.session_id

    system.kill("voice")
    system.restart("voice")
    successor = Caller(bus)
    deadline = time.monotonic() + 20
    while not (await successor.prepare("phone")).ok:  # busy until the dead holder's lock expires
        assert time.monotonic() < deadline, "the voice lock of the killed process never expired"
        await asyncio.sleep(0.2)

    old = await events_until(bus, old_session, "span.closed")
    kinds = [e.kind for e in old]
    assert kinds[-2:] == ["session.ended", "span.closed"]
    ended = old[-2]
    assert ended.payload["reason"] == "voice_lost" and ended.payload["session_id"] == old_session
    assert [(e.role, e.payload["text"]) for e in old if e.kind == "message"] == [
        ("user", "remember the blue door"), ("assistant", "I will remember the blue door."),
    ]
    new = await events_until(bus, successor.session_id, "session.started")
    assert new[0].conversation_id == old[0].conversation_id  # the same conversation goes on
    assert (old[-1].ts, old[-1].id) < (new[0].ts, new[0].id)  # closed before the new one opened
    assert (await successor.attach()).ok
    await successor.hang_up()
    await events_until(bus, successor.session_id, "span.closed")
    await successor.close()


async def wait_for_messages(bus: Any, session_id: str, count: int) -> None:
    deadline = time.monotonic() + 20
    while True:
        events = await ledger_events(bus, kinds=["message"])
        if len([e for e in events if e.payload.get("meta", {}).get("session_id") == session_id]) >= count:
            return
        assert time.monotonic() < deadline, "the call's messages were not committed"
        await asyncio.sleep(0.1)
