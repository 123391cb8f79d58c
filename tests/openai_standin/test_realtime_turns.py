"""Realtime stand-in: voice turns found by the energy VAD, deterministic
transcripts and answers, audio deltas in the session's output format and pace."""

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from openai import AsyncOpenAI

from tests.support.standin import (
    PCM24,
    ULAW,
    RealtimeEvents,
    StandinProcess,
    append_audio,
    speech_audio,
    start_standin,
)

PHONE_SESSION: dict[str, Any] = {
    "type": "realtime",
    "audio": {
        "input": {"format": ULAW, "transcription": {"model": "gpt-transcribe"}},
        "output": {"format": ULAW},
    },
}


@pytest.fixture(scope="module")
def instant_process() -> Iterator[StandinProcess]:
    with start_standin(env={"STANDIN_REALTIME_PACE": "instant"}) as fast:
        yield fast


@pytest.fixture
def instant(instant_process: StandinProcess) -> StandinProcess:
    """A stand-in sending answer audio all at once: for the tests of what is sent, not when
    (the pace is the session-wide stand-in's business, and the interrupt tests')."""
    instant_process.reset()
    return instant_process


async def _configured(conn: Any, session: dict[str, Any]) -> RealtimeEvents:
    events = RealtimeEvents(conn)
    await events.until("session.created")
    await conn.session.update(session=session)
    await events.until("session.updated")
    return events


async def test_vad_turn_from_mulaw_speech(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, PHONE_SESSION)
        await append_audio(conn, speech_audio(600, 800, lead_ms=500))
        started = await events.until("input_audio_buffer.speech_started")
        stopped = await events.until("input_audio_buffer.speech_stopped")
        committed = await events.until("input_audio_buffer.committed")
        added = await events.until("conversation.item.added")
        await events.until("conversation.item.done")
        transcribed = await events.until("conversation.item.input_audio_transcription.completed")
        created = await events.until("response.created")
        done = await events.until("response.done")
    # Speech from 500 to 1100 ms: the start reaches back the 300 ms prefix, the stop
    # comes after 500 ms of silence.
    assert started["audio_start_ms"] == 200
    assert stopped["audio_end_ms"] == 1600
    item_id = started["item_id"]
    assert stopped["item_id"] == committed["item_id"] == item_id == added["item"]["id"]
    assert added["item"]["role"] == "user"
    assert added["item"]["content"] == [{"type": "input_audio", "transcript": None}]
    assert transcribed["item_id"] == item_id
    assert transcribed["transcript"] == "(speech, 0.6 s)"
    assert created["response"]["status"] == "in_progress"
    assert done["response"]["status"] == "completed"
    assert done["response"]["output"][0]["content"][0]["transcript"] == "Offline stand-in: I heard “(speech, 0.6 s)”."
    usage = done["response"]["usage"]
    assert usage["input_tokens"] > 0
    assert usage["output_token_details"]["audio_tokens"] > 0
    [record] = standin.realtime_sessions()
    appends = [e for e in record["events"] if e["type"] == "input_audio_buffer.append"]
    assert {e["audio"] for e in appends} == {160}  # payloads logged as their byte length


async def test_scripted_transcripts_and_answers_apply_to_turns_in_order(
    aclient: AsyncOpenAI, standin: StandinProcess
) -> None:
    standin.realtime_script(
        {"transcript": "what time is it", "answer": "Half past nine."},
        {"transcript": "thanks", "answer": "You're welcome."},
    )
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, PHONE_SESSION)
        heard, said = [], []
        for _ in range(2):
            await append_audio(conn, speech_audio(400, 700))
            heard.append((await events.until("conversation.item.input_audio_transcription.completed"))["transcript"])
            said.append((await events.until("response.output_audio_transcript.done"))["transcript"])
            await events.until("response.done")
    assert heard == ["what time is it", "thanks"]
    assert said == ["Half past nine.", "You're welcome."]
    assert standin.realtime_pending_script() == []


@pytest.mark.integration
async def test_audio_deltas_are_the_output_format_in_100_ms_chunks(instant: StandinProcess) -> None:
    answer = "x" * 30  # 60 ms per character: 1.8 s of audio
    instant.realtime_script({"answer": answer}, {"answer": answer})
    async with instant.async_client().realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, {"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        chunks: dict[str, list[bytes]] = {}
        for fmt in (ULAW, PCM24):
            await conn.conversation.item.create(
                item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
            )
            options: Any = {"audio": {"output": {"format": fmt}}}
            await conn.response.create(response=options)
            await events.until("response.done")
            chunks[fmt["type"]] = [
                base64.b64decode(e["delta"])
                for e in events.seen
                if e["type"] == "response.output_audio.delta" and e["response_id"] not in chunks
            ]
            events.seen.clear()
    assert [len(c) for c in chunks["audio/pcmu"]] == [800] * 18  # 8 kHz, one byte a sample
    assert [len(c) for c in chunks["audio/pcm"]] == [4800] * 18  # 24 kHz, two bytes a sample
    assert chunks["audio/pcmu"][0] != bytes(800)  # a tone, not silence


async def test_transcript_and_audio_deltas_interleave_in_order(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script({"answer": "Hello there, friend."})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, {"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
        )
        await conn.response.create()
        await events.until("response.done")
    kinds = [t for t in events.types() if t.startswith(("response.", "conversation.item."))]
    deltas = [k for k in kinds if k.endswith(".delta")]
    assert kinds[:6] == [
        "conversation.item.added",
        "conversation.item.done",
        "response.created",
        "response.output_item.added",
        "conversation.item.added",
        "response.content_part.added",
    ]
    assert kinds[6 : 6 + len(deltas)] == deltas
    assert deltas[:2] == ["response.output_audio_transcript.delta", "response.output_audio.delta"]
    assert kinds[6 + len(deltas) :] == [
        "response.output_audio.done",
        "response.output_audio_transcript.done",
        "response.content_part.done",
        "response.output_item.done",
        "conversation.item.done",
        "response.done",
    ]
    text = "".join(e["delta"] for e in events.seen if e["type"] == "response.output_audio_transcript.delta")
    assert text == "Hello there, friend."


async def test_manual_turn_with_text_and_a_greeting(aclient: AsyncOpenAI) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(
            conn, {"type": "realtime", "output_modalities": ["text"], "audio": {"input": {"turn_detection": None}}}
        )
        await conn.response.create(response={"instructions": 'Greet the caller: "Hi, Delegate here."'})
        greeting = await events.until("response.output_text.done")
        await events.until("response.done")
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Is it   raining?"}]}
        )
        await conn.response.create()
        answer = await events.until("response.output_text.done")
        done = await events.until("response.done")
    assert greeting["text"] == "Hi, Delegate here."
    assert answer["text"] == "Offline stand-in: I heard “Is it raining?”."
    assert done["response"]["output"][0]["content"] == [{"type": "output_text", "text": answer["text"]}]


async def test_manual_commit_of_pcm16_audio(aclient: AsyncOpenAI) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, {"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        await append_audio(conn, speech_audio(300, 0, fmt=PCM24), chunk_bytes=4800)
        await conn.input_audio_buffer.commit()
        committed = await events.until("input_audio_buffer.committed")
        await events.until("conversation.item.done")
        await conn.input_audio_buffer.append(audio=base64.b64encode(bytes(960)).decode())
        await conn.input_audio_buffer.clear()
        await events.until("input_audio_buffer.cleared")
        await conn.input_audio_buffer.commit(event_id="evt_after_clear")
        error = await events.until("error")
    assert committed["item_id"].startswith("item_")
    assert error["error"]["event_id"] == "evt_after_clear"
    # VAD is off: no speech events and no automatic response.
    assert "input_audio_buffer.speech_started" not in events.types()
    assert "response.created" not in events.types()


@pytest.mark.integration
async def test_instant_pace_sends_the_same_deltas(instant: StandinProcess) -> None:
    instant.realtime_script({"answer": "y" * 100})  # 6 s of audio, not paced
    async with instant.async_client().realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, PHONE_SESSION)
        await append_audio(conn, speech_audio(400, 700))
        await events.until("response.done")
    assert events.types().count("response.output_audio.delta") == 60


async def test_semantic_vad_waits_500_ms_and_create_response_off_waits_for_the_client(
    aclient: AsyncOpenAI,
) -> None:
    session = {
        "type": "realtime",
        "audio": {
            "input": {
                "format": ULAW,
                "turn_detection": {"type": "semantic_vad", "eagerness": "high", "create_response": False},
            }
        },
    }
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, session)
        await append_audio(conn, speech_audio(400, 600))
        stopped = await events.until("input_audio_buffer.speech_stopped")
        committed = await events.until("input_audio_buffer.committed")
        await events.until("conversation.item.done")
        await conn.response.create(response={"output_modalities": ["text"]})
        answer = await events.until("response.output_text.done")
    assert stopped["audio_end_ms"] == 900
    assert committed["item_id"] == stopped["item_id"]
    # Transcription is off: no transcription event, but the answer still quotes the turn.
    assert "conversation.item.input_audio_transcription.completed" not in events.types()
    assert answer["text"] == "Offline stand-in: I heard “(speech, 0.4 s)”."


async def test_item_create_places_items_and_refuses_unknown_neighbours(aclient: AsyncOpenAI) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, {"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        await conn.conversation.item.create(
            item={"type": "message", "role": "system", "content": [{"type": "input_text", "text": "Be kind."}]}
        )
        first = await events.until("conversation.item.done")
        await conn.conversation.item.create(
            item={
                "id": "item_top",
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": "a"}],
            },
            previous_item_id="root",
        )
        top = await events.until("conversation.item.added")
        await conn.conversation.item.create(
            item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": "b"}]},
            previous_item_id="item_missing",
            event_id="evt_where",
        )
        error = await events.until("error")
        await conn.conversation.item.retrieve(item_id="item_top")
        retrieved = await events.until("conversation.item.retrieved")
    assert first["item"]["object"] == "realtime.item"
    assert first["previous_item_id"] is None
    assert top["previous_item_id"] is None
    assert top["item"]["id"] == "item_top"
    assert error["error"]["event_id"] == "evt_where"
    assert error["error"]["code"] == "item_not_found"
    assert retrieved["item"]["content"] == [{"type": "input_text", "text": "a"}]


@pytest.mark.integration
async def test_the_offline_demo_tells_a_caller_how_to_connect_a_real_model(instant: StandinProcess) -> None:
    # The key `make run` gives the services without OPENAI_API_KEY: someone is trying Delegate.
    # (What it says is checked, not its pace: the instant stand-in saves the ~8 s it takes to say.)
    demo = AsyncOpenAI(api_key="offline-standin", base_url=instant.base_url, max_retries=0)
    async with demo, demo.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, PHONE_SESSION)
        await append_audio(conn, speech_audio(400, 700))
        done = await events.until("response.done")
    said = done["response"]["output"][0]["content"][0]["transcript"]
    assert "offline demo" in said and "OPENAI_API_KEY" in said
    assert "(speech" not in said
