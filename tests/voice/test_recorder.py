"""Spoken order: a caller's transcript that completes after the answer to it still comes first."""

import asyncio
from collections.abc import Callable
from typing import Any

from nats.aio.msg import Msg

from delegate.contracts import subjects
from delegate.contracts.events import Fence, VoiceTiming
from delegate.contracts.ids import new_id
from delegate.voice.ledger import VoiceLedger
from delegate.voice.recorder import Recorder
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import ledger_events


async def test_messages_follow_the_conversation_order_not_the_transcript_order(
    make_system: Callable[..., System], connect: Any
) -> None:
    system = make_system()  # the ledger only: the test writes as the voice service would
    bus, _ = await connect(system)
    conversation, span = new_id(), new_id()
    recorder = Recorder(VoiceLedger(bus), lambda: Fence(singleton="voice", token=1), session_id="s1", channel="phone")
    recorder.start(conversation, span)
    recorder.heard = True
    recorder.add_item("item_U1", "user")
    recorder.add_item("item_A1", "assistant")
    recorder.said("item_A1", "assistant", "The answer, finished first.")
    marker = recorder.write(VoiceTiming(session_id="s1"))  # written in queue order: after anything said so far
    committed = await wait_for_count(bus, conversation, 1)
    assert [e.id for e in committed] == [marker.id]  # the answer is held back behind the caller's turn
    recorder.said("item_U1", "user", "The question, transcribed late.")
    recorder.add_item("item_U2", "user")
    recorder.said("item_U2", "user", "   ")  # no words: nothing to write, and it holds nothing back
    recorder.add_item("item_A2", "assistant")
    recorder.said("item_A2", "assistant", "A second answer.", interrupted=True, played_ms=700)
    await recorder.close(10.0)

    events = await wait_for_count(bus, conversation, 4)
    ordered = sorted((e for e in events if e.kind == "message"), key=lambda e: (e.ts, e.id))
    assert [e.seq for e in ordered] == sorted(e.seq for e in ordered)  # timeline order = commit order
    assert [(e.role, e.payload["text"]) for e in ordered] == [
        ("user", "The question, transcribed late."),
        ("assistant", "The answer, finished first."),
        ("assistant", "A second answer."),
    ]
    assert ordered[0].payload["meta"] == {"session_id": "s1", "item_id": "item_U1"}
    assert ordered[2].payload["meta"] == {"session_id": "s1", "item_id": "item_A2", "interrupted": True,
                                          "played_ms": 700}
    assert all(e.span_id == span and e.channel == "phone" for e in ordered)


AUDIO = "test.voice.audio"  # stands in for the call's voice_out subject: the order is what is tested


async def test_a_write_waits_until_the_calls_audio_has_gone(
    make_system: Callable[..., System], connect: Any
) -> None:
    """An answer's last delta and its done events' records are queued in one step: the audio
    leaves first, and the records only once it has been quiet for ``audio_quiet_s``."""
    system = make_system()
    bus, _ = await connect(system)
    seen = await watch(bus)
    recorder = Recorder(VoiceLedger(bus), lambda: Fence(singleton="voice", token=1), session_id="s1",
                        channel="phone", audio_quiet_s=0.3)
    recorder.start(new_id(), new_id())
    recorder.write(VoiceTiming(session_id="s1"))  # queued first: without the wait it is published first
    for n in range(5):
        recorder.audio_out()
        await bus.emit_raw(AUDIO, str(n).encode())
        await asyncio.sleep(0.02)  # an answer's pace: well inside the quiet period
    await bus.emit_raw(AUDIO, b"end")
    await eventually(lambda: "append" in seen, "the record published", 15)
    await recorder.close(10.0)
    assert seen == ["0", "1", "2", "3", "4", "end", "append"]


async def test_an_answer_that_streams_on_holds_a_write_back_no_longer_than_audio_hold_max_s(
    make_system: Callable[..., System], connect: Any
) -> None:
    system = make_system()
    bus, _ = await connect(system)
    seen = await watch(bus)
    recorder = Recorder(VoiceLedger(bus), lambda: Fence(singleton="voice", token=1), session_id="s1",
                        channel="phone", audio_quiet_s=0.3, audio_hold_max_s=0.5)
    recorder.start(new_id(), new_id())
    recorder.write(VoiceTiming(session_id="s1"))
    frames = 0
    while "append" not in seen and frames < 1500:  # 30 s of audio, far past the hold
        recorder.audio_out()
        await bus.emit_raw(AUDIO, str(frames).encode())
        frames += 1
        await asyncio.sleep(0.02)
    await recorder.close(10.0)
    assert "append" in seen and frames < 1500  # published while the audio still flowed
    assert seen.index("append") >= 3  # ... though only after it had waited behind some of it


async def test_records_held_behind_the_audio_are_made_when_the_call_ends(
    make_system: Callable[..., System], connect: Any
) -> None:
    """A call can end right behind its last answer: what waited for the audio is written, in
    order, before the call's last events."""
    system = make_system()
    bus, _ = await connect(system)
    conversation = new_id()
    recorder = Recorder(VoiceLedger(bus), lambda: Fence(singleton="voice", token=1), session_id="s1",
                        channel="phone", audio_quiet_s=60.0, audio_hold_max_s=60.0)
    recorder.start(conversation, new_id())
    recorder.heard = True
    recorder.add_item("item_A1", "assistant")
    recorder.audio_out()
    recorder.after_audio(lambda: recorder.said("item_A1", "assistant", "Goodbye!"))
    recorder.after_audio(lambda: recorder.write(VoiceTiming(session_id="s1", response_id="resp_1")))
    recorder.flush(final=True)  # the session's end
    recorder.write(VoiceTiming(session_id="s1", response_id="resp_end"))
    await recorder.close(10.0)

    events = sorted(await wait_for_count(bus, conversation, 3), key=lambda e: e.seq)
    assert [(e.kind, e.payload.get("text") or e.payload.get("response_id")) for e in events] == [
        ("message", "Goodbye!"), ("voice.timing", "resp_1"), ("voice.timing", "resp_end"),
    ]


async def watch(bus: Any) -> list[str]:
    """What the test's connection publishes, in the order it arrives: audio frames by their
    payload, the voice service's ledger appends as "append"."""
    seen: list[str] = []

    async def on_msg(msg: Msg) -> None:
        seen.append("append" if msg.subject == subjects.ledger_append("voice") else msg.data.decode())

    await bus.nc.subscribe(AUDIO, cb=on_msg)
    await bus.nc.subscribe(subjects.ledger_append("voice"), cb=on_msg)
    await bus.nc.flush()
    return seen


async def wait_for_count(bus: Any, conversation: str, count: int) -> list[Any]:
    found: list[Any] = []

    async def poll() -> None:
        found[:] = await ledger_events(bus, conversation_id=conversation)

    async def check() -> bool:
        await poll()
        return len(found) >= count

    await eventually(check, f"{count} events committed", 15, interval=0.1, explain=lambda: f"{len(found)} committed")
    return found
