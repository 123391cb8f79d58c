"""A call's conversation: its context, what was said (in the ledger, in order), barge-in, a lost model."""

import base64
import itertools
from collections.abc import Callable
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import ContextCapsule, ConversationOpened, Message, make_event
from delegate.contracts.ids import new_id
from delegate.contracts.voice import AudioOut, ClearOut, MarkOut, TranscriptOut
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import Caller, events_until, ledger_events, session_updates

STORY = (
    "Once upon a time there was a lighthouse keeper who counted every ship that passed, "
    "and one winter night a ship came that was not on any chart."
)


def messages(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.role, e.payload["text"]) for e in events if e.kind == "message"]


async def test_first_session_update_carries_capsule_and_recent_turns(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    conversation = new_id()

    async def seed(payload: Any, role: Any = None) -> None:
        event = make_event(payload, conversation_id=conversation, span_id=None, channel="text", role=role)
        await bus.publish(topics.ledger_append("test"), event, msg_id=event.id)

    await seed(ConversationOpened())
    await seed(Message(text="My sister Ada visits on Friday."), role="user")
    await seed(Message(text="Noted, I'll remind you on Thursday."), role="assistant")
    await seed(ContextCapsule(text="The owner drinks green tea and lives in Lisbon.", through_seq=0))
    await _wait_committed(bus, conversation, 4)

    assert (await caller.prepare("phone")).ok
    update = (await eventually(lambda: session_updates(standin), "the session.update"))[0]
    instructions = update["instructions"]
    assert "green tea and lives in Lisbon" in instructions  # the capsule
    assert "## Recent conversation" in instructions
    assert "My sister Ada visits on Friday." in instructions and "remind you on Thursday" in instructions
    assert "[text chat ·" in instructions  # marked with where they were said
    assert "phone call" in instructions and "Be brief." in instructions  # channel and the preset's style
    assert update["type"] == "realtime" and update["output_modalities"] == ["audio"]
    assert update["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert update["audio"]["output"] == {"format": {"type": "audio/pcmu"}, "voice": "marin"}
    detection = update["audio"]["input"]["turn_detection"]
    assert detection["type"] == "server_vad" and detection["create_response"] and detection["interrupt_response"]
    assert update["audio"]["input"]["transcription"]["model"]
    assert update["truncation"] == {"type": "retention_ratio", "retention_ratio": 0.8}

    assert (await caller.attach()).ok
    await caller.hang_up()
    events = await events_until(bus, caller.session_id, "span.closed")
    assert all(e.conversation_id == conversation for e in events)  # the call joins the open conversation


async def test_transcripts_in_spoken_order(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "what is the weather like", "answer": "It is sunny today."})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer")
    await eventually(lambda: caller.played_bytes >= _bytes_of(caller), "the answer played out", timeout=20)
    await caller.hang_up()

    events = await events_until(bus, caller.session_id, "span.closed")
    kinds = [e.kind for e in events]
    assert kinds[:2] == ["span.opened", "session.started"] and kinds[-2:] == ["session.ended", "span.closed"]
    assert messages(events) == [("user", "what is the weather like"), ("assistant", "It is sunny today.")]
    said = [e for e in events if e.kind == "message"]
    assert all(e.channel == "phone" and e.payload["meta"]["session_id"] == caller.session_id for e in said)
    assert all(e.payload["meta"]["item_id"] for e in said)
    assert "interrupted" not in said[1].payload["meta"]
    timing = [e for e in events if e.kind == "voice.timing"]
    assert timing and timing[0].payload["speech_stopped_to_first_audio_ms"] is not None
    assert [e for e in events if e.kind == "context.usage"]
    captions = [(t.role, t.text) for t in caller.of(TranscriptOut) if t.final]
    assert captions == [("user", "what is the weather like"), ("assistant", "It is sunny today.")]
    # every chunk of audio was followed by its mark
    outs = [r.msg for r in caller.received if isinstance(r.msg, AudioOut | MarkOut)]
    assert outs and all(isinstance(b, MarkOut) for a, b in itertools.pairwise(outs) if isinstance(a, AudioOut))


async def test_greeting_is_said_first(make_system: Callable[..., System], connect: Any) -> None:
    system = make_system("voice", quiet=False)  # the built-in default preset greets
    bus, caller = await connect(system)
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await eventually(lambda: caller.of(AudioOut), "the greeting's audio")
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.final], "the greeting's transcript")
    await caller.hang_up()
    events = await events_until(bus, caller.session_id, "span.closed")
    said = [e for e in events if e.kind == "message"]
    assert said and said[0].role == "assistant" and "Delegate" in said[0].payload["text"]
    assert said[0].payload["meta"].get("greeting") is True
    timing = [e for e in events if e.kind == "voice.timing"]
    assert timing and timing[0].payload["start_to_first_audio_ms"] is not None


async def test_barge_in_clears_cancels_and_truncates_at_what_was_heard(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    standin.realtime_script(
        {"transcript": "tell me a story", "answer": STORY}, {"transcript": "stop please", "answer": "Okay."}
    )
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await eventually(lambda: caller.played_bytes >= 8 * 1200, "1.2 s of the story heard", timeout=20)
    await caller.say(speech_ms=600, silence_ms=800)  # the caller talks over it
    await eventually(lambda: caller.of(ClearOut), "the clear")
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.final and t.text == "Okay."],
                     "the second answer")
    await caller.hang_up()

    clear_at = next(i for i, r in enumerate(caller.received) if isinstance(r.msg, ClearOut))
    before, after = caller.received[:clear_at], caller.received[clear_at + 1 :]
    cut_item = next(r.msg.name for r in reversed(before) if isinstance(r.msg, MarkOut)).rsplit(":", 1)[0]
    # sent and played, in ms, as the caller's side counted them up to the clear
    sent_bytes, chunk, mark_ms = 0, 0, {}
    for r in before:
        if isinstance(r.msg, AudioOut):
            chunk = len(base64.b64decode(r.msg.audio))
        elif isinstance(r.msg, MarkOut):
            if r.msg.name.startswith(cut_item + ":"):
                sent_bytes += chunk
                mark_ms[r.msg.name] = sent_bytes / 8
            chunk = 0
    sent_ms = sent_bytes / 8
    heard = [mark_ms[name] for name in caller.echoed if name in mark_ms]
    candidates = {int(min(sent_ms, 50.0))} | {int(min(sent_ms, ms + 50.0)) for ms in heard}

    truncations = [t for s in standin.realtime_sessions() for t in s["truncations"]]
    assert len(truncations) == 1 and truncations[0]["item_id"] == cut_item
    assert truncations[0]["audio_end_ms"] in candidates
    assert truncations[0]["audio_end_ms"] <= sent_ms <= truncations[0]["audio_sent_ms"]
    assert heard  # playback had reached some marks: the cut is not at zero
    # not one frame of the cancelled answer after the clear
    assert not [r for r in after if isinstance(r.msg, MarkOut) and r.msg.name.startswith(cut_item + ":")]
    client_events = [e for s in standin.realtime_sessions() for e in s["events"]]
    assert any(e.get("type") == "conversation.item.truncate" for e in client_events)

    events = await events_until(bus, caller.session_id, "span.closed")
    said = [e for e in events if e.kind == "message"]
    assert [e.role for e in said] == ["user", "assistant", "user", "assistant"]
    story = said[1]
    assert story.payload["meta"]["interrupted"] is True and story.payload["meta"]["item_id"] == cut_item
    assert story.payload["meta"]["played_ms"] >= 1000
    assert STORY.startswith(story.payload["text"]) and story.payload["text"] != STORY
    assert said[2].payload["text"] == "stop please" and said[3].payload["text"] == "Okay."


async def test_realtime_drop_ends_the_call_with_what_was_said(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "hello there", "answer": STORY, "disconnect_after_deltas": 10})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    end = await eventually(caller.ended, "the call's end", timeout=20)
    assert end.reason == "realtime_lost" and end.message  # the gateway closes; Twilio plays the apology

    events = await events_until(bus, caller.session_id, "span.closed")
    ended = next(e for e in events if e.kind == "session.ended")
    assert ended.payload["reason"] == "realtime_lost"
    said = [e for e in events if e.kind == "message"]
    assert said[0].role == "user" and said[0].payload["text"] == "hello there"
    cut = [e for e in said if e.role == "assistant"]
    assert cut and cut[0].payload["meta"]["interrupted"] is True and STORY.startswith(cut[0].payload["text"])
    assert events.index(said[-1]) < events.index(ended)


def _bytes_of(caller: Caller) -> int:
    return sum(len(base64.b64decode(a.audio)) for a in caller.of(AudioOut))


async def _wait_committed(bus: Any, conversation: str, count: int) -> None:
    async def committed() -> int:
        return len(await ledger_events(bus, conversation_id=conversation))

    async def enough() -> bool:
        return await committed() >= count

    await eventually(enough, "the seeded events committed", 15)
