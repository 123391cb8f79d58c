"""A voice process killed mid-call: its successor closes the call it left open (voice_lost)."""

from collections.abc import Callable
from typing import Any

from delegate.contracts.voice import TranscriptOut
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import Caller, events_until, ledger_events


async def test_sigkill_mid_call_then_the_next_prepare_closes_the_stale_call(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice", fresh=True, VOICE_LOCK_TTL_S="2")  # its voice is killed
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "remember the blue door", "answer": "I will remember the blue door."})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer")
    # what was said is in the ledger as it happens, before any end
    await wait_for_messages(bus, caller.session_id, 2)
    old_session = caller.session_id

    system.kill("voice")
    system.restart("voice")
    successor = Caller(bus)

    async def prepared() -> bool:  # busy until the dead holder's lock expires
        return (await successor.prepare("phone")).ok

    await eventually(prepared, "the voice lock of the killed process to expire", 20, interval=0.2)

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
    async def committed() -> bool:
        events = await ledger_events(bus, kinds=["message"])
        return len([e for e in events if e.payload.get("meta", {}).get("session_id") == session_id]) >= count

    await eventually(committed, f"the call's {count} messages committed", 20, interval=0.1)
