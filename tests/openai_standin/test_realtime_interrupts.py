"""Realtime stand-in: cancel, barge-in, truncate, function calls and the scripted
faults (error event, slow answer, dropped socket)."""

from typing import Any

import pytest
from openai import AsyncOpenAI
from websockets.exceptions import ConnectionClosedError

from tests.support.standin import ULAW, RealtimeEvents, StandinProcess, append_audio, speech_audio

LONG_ANSWER = "This answer goes on for a while, long enough to be interrupted halfway through it."
MANUAL: dict[str, Any] = {"type": "realtime", "audio": {"input": {"turn_detection": None}}}
PHONE: dict[str, Any] = {"type": "realtime", "audio": {"input": {"format": ULAW}, "output": {"format": ULAW}}}


async def _configured(conn: Any, session: dict[str, Any]) -> RealtimeEvents:
    events = RealtimeEvents(conn)
    await events.until("session.created")
    await conn.session.update(session=session)
    await events.until("session.updated")
    return events


async def _say(conn: Any, text: str) -> None:
    await conn.conversation.item.create(
        item={"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    )


def _after(events: RealtimeEvents, marker: dict[str, Any]) -> list[dict[str, Any]]:
    return events.seen[events.seen.index(marker) + 1 :]


async def test_client_cancel_stops_the_deltas(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script({"answer": LONG_ANSWER})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, MANUAL)
        await _say(conn, "talk to me")
        await conn.response.create()
        first = await events.until("response.output_audio.delta")
        await conn.response.cancel()
        done = await events.until("response.done")
        await conn.response.cancel(event_id="evt_nothing")
        error = await events.until("error")
    assert done["response"]["id"] == first["response_id"]
    assert done["response"]["status"] == "cancelled"
    assert done["response"]["status_details"] == {"type": "cancelled", "reason": "client_cancelled"}
    assert done["response"]["output"][0]["status"] == "incomplete"
    spoken = done["response"]["output"][0]["content"][0]["transcript"]
    assert LONG_ANSWER.startswith(spoken) and spoken != LONG_ANSWER
    assert error["error"]["code"] == "response_cancel_not_active"
    assert error["error"]["event_id"] == "evt_nothing"
    [record] = standin.realtime_sessions()
    [cancel] = record["cancels"]
    assert cancel["response_id"] == first["response_id"]
    assert cancel["reason"] == "client_cancelled"


async def test_barge_in_cancels_with_turn_detected_and_no_delta_follows(
    aclient: AsyncOpenAI, standin: StandinProcess
) -> None:
    standin.realtime_script({"transcript": "tell me a story", "answer": LONG_ANSWER}, {"transcript": "stop"})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, PHONE)
        await append_audio(conn, speech_audio(500, 700))
        first = await events.until("response.output_audio.delta")
        await append_audio(conn, speech_audio(400, 700))  # the caller talks over the answer
        barge = await events.until("input_audio_buffer.speech_started")
        cancelled = await events.until("response.done")
        second = await events.until("response.done")
    assert cancelled["response"]["id"] == first["response_id"]
    assert cancelled["response"]["status"] == "cancelled"
    assert cancelled["response"]["status_details"]["reason"] == "turn_detected"
    assert events.seen.index(barge) < events.seen.index(cancelled)
    late = [e for e in _after(events, cancelled) if e.get("response_id") == first["response_id"]]
    assert late == []
    assert second["response"]["status"] == "completed"
    assert second["response"]["output"][0]["content"][0]["transcript"] == "Offline stand-in: I heard “stop”."


async def test_truncate_within_the_audio_sent_and_beyond_it(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script({"answer": LONG_ANSWER})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, MANUAL)
        await _say(conn, "go on")
        await conn.response.create()
        delta = await events.until("response.output_audio.delta")
        await conn.response.cancel()
        await events.until("response.done")
        item_id = delta["item_id"]
        await conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=50)
        truncated = await events.until("conversation.item.truncated")
        await conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=60_000, event_id="e1")
        too_long = await events.until("error")
        await conn.conversation.item.truncate(item_id="item_nope", content_index=0, audio_end_ms=0, event_id="e2")
        unknown = await events.until("error")
    assert truncated == {**truncated, "item_id": item_id, "content_index": 0, "audio_end_ms": 50}
    assert too_long["error"]["event_id"] == "e1"
    assert too_long["error"]["param"] == "audio_end_ms"
    assert unknown["error"]["event_id"] == "e2"
    assert unknown["error"]["code"] == "item_not_found"
    [record] = standin.realtime_sessions()
    [truncation] = record["truncations"]
    assert truncation["item_id"] == item_id
    assert truncation["audio_end_ms"] == 50
    assert truncation["audio_sent_ms"] >= 100


async def test_tool_call_round_trip(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script(
        {"tool_call": {"name": "notes_create", "arguments": {"title": "Buy milk"}, "call_id": "call_milk"}}
    )
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, {**MANUAL, "output_modalities": ["text"]})
        await _say(conn, "note: buy milk")
        await conn.response.create()
        added = await events.until("response.output_item.added")
        arguments = await events.until("response.function_call_arguments.done")
        done = await events.until("response.done")
        await conn.conversation.item.create(
            item={"type": "function_call_output", "call_id": "call_milk", "output": '{"ok": true}'}
        )
        await events.until("conversation.item.done")
        await conn.response.create()
        answer = await events.until("response.output_text.done")
        await events.until("response.done")
    assert added["item"]["type"] == "function_call"
    assert added["item"]["name"] == "notes_create"
    assert added["item"]["call_id"] == "call_milk"
    assert arguments["name"] == "notes_create"
    assert arguments["arguments"] == '{"title":"Buy milk"}'
    deltas = [e["delta"] for e in events.seen if e["type"] == "response.function_call_arguments.delta"]
    assert "".join(deltas) == arguments["arguments"]
    assert done["response"]["status"] == "completed"
    assert done["response"]["output"][0]["arguments"] == '{"title":"Buy milk"}'
    assert answer["text"] == 'Offline stand-in: notes_create returned “{"ok": true}”.'


async def test_scripted_error_replaces_the_response(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script({"error": {"code": "rate_limit_exceeded", "message": "Slow down."}})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, MANUAL)
        await _say(conn, "hello")
        await conn.response.create(event_id="evt_go")
        error = await events.until("error")
        await _say(conn, "hello again")
        await conn.response.create()
        done = await events.until("response.done")
    assert error["error"]["code"] == "rate_limit_exceeded"
    assert error["error"]["message"] == "Slow down."
    assert error["error"]["event_id"] == "evt_go"
    assert events.types().count("response.created") == 1  # only the second turn's
    assert done["response"]["status"] == "completed"


async def test_scripted_delay_holds_the_first_delta(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    standin.realtime_script({"answer": "Finally.", "delay_ms": 3000})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, MANUAL)
        await _say(conn, "well?")
        await conn.response.create()
        await events.until("response.content_part.added")
        await conn.response.cancel()  # still waiting: cancelled before any delta
        done = await events.until("response.done")
    assert done["response"]["status"] == "cancelled"
    assert "response.output_audio.delta" not in events.types()


async def test_scripted_disconnect_drops_the_socket_after_n_deltas(
    aclient: AsyncOpenAI, standin: StandinProcess
) -> None:
    standin.realtime_script({"answer": LONG_ANSWER, "disconnect_after_deltas": 3})
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = await _configured(conn, MANUAL)
        await _say(conn, "hello")
        await conn.response.create()
        with pytest.raises(ConnectionClosedError) as closed:
            while True:
                await events.next()
    assert closed.value.rcvd is None  # no close frame: the connection just ended
    assert events.types().count("response.output_audio.delta") == 3
    assert "response.done" not in events.types()
    [record] = standin.realtime_sessions()
    assert record["closed_at"] is not None
