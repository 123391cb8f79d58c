"""Realtime stand-in: handshake, session config and refusing bad events, through
the official SDK's `realtime.connect`."""

import json
from typing import Any

import pytest
from openai import AsyncOpenAI
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests.support.standin import RealtimeEvents, StandinProcess


async def test_handshake_sends_session_created_with_ga_defaults(aclient: AsyncOpenAI) -> None:
    async with aclient.realtime.connect(model="gpt-realtime-mini") as conn:
        events = RealtimeEvents(conn)
        created = await events.next()
    assert created["type"] == "session.created"
    config = created["session"]
    assert config["id"].startswith("sess_")
    assert config["object"] == "realtime.session"
    assert isinstance(config["expires_at"], int)
    assert config["type"] == "realtime"
    assert config["model"] == "gpt-realtime-mini"
    assert config["output_modalities"] == ["audio"]
    assert config["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert config["audio"]["output"]["format"] == {"type": "audio/pcm", "rate": 24000}
    assert config["audio"]["output"]["voice"] == "marin"
    assert config["audio"]["input"]["turn_detection"] == {
        "type": "server_vad",
        "threshold": 0.5,
        "prefix_padding_ms": 300,
        "silence_duration_ms": 500,
        "idle_timeout_ms": None,
        "create_response": True,
        "interrupt_response": True,
    }
    assert config["truncation"] == "auto"


async def test_update_merges_present_fields_and_answers_the_full_config(aclient: AsyncOpenAI) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = RealtimeEvents(conn)
        await events.next()
        await conn.session.update(
            session={
                "type": "realtime",
                "instructions": "Be brief.",
                "audio": {"input": {"format": {"type": "audio/pcmu"}}, "output": {"voice": "cedar"}},
                "truncation": {"type": "retention_ratio", "retention_ratio": 0.8},
            }
        )
        first = (await events.until("session.updated"))["session"]
        await conn.session.update(
            session={"type": "realtime", "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}
        )
        second = (await events.until("session.updated"))["session"]
        await conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": None}}})
        third = (await events.until("session.updated"))["session"]
    assert first["instructions"] == "Be brief."
    assert first["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert first["audio"]["output"] == {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "cedar", "speed": 1.0}
    assert first["audio"]["input"]["turn_detection"]["type"] == "server_vad"  # untouched by the update
    assert first["truncation"] == {"type": "retention_ratio", "retention_ratio": 0.8}
    assert second["instructions"] == "Be brief."
    assert second["audio"]["input"]["format"] == {"type": "audio/pcmu"}
    assert second["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad",
        "eagerness": "auto",
        "create_response": True,
        "interrupt_response": True,
    }
    assert third["audio"]["input"]["turn_detection"] is None
    assert third["id"] == first["id"]


@pytest.mark.parametrize(
    ("update", "param"),
    [
        ({"audio": {"input": {"format": {"type": "audio/wav"}}}}, "session.audio.input.format.type"),
        ({"audio": {"output": {"format": {"type": "g711_ulaw"}}}}, "session.audio.output.format.type"),
        ({"truncation": {"type": "retention_ratio", "retention_ratio": 1.5}}, "session.truncation.retention_ratio"),
        ({"voice": "marin"}, "session.voice"),
    ],
)
async def test_invalid_update_is_an_error_event_and_changes_nothing(
    aclient: AsyncOpenAI, update: dict[str, object], param: str
) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = RealtimeEvents(conn)
        created = (await events.next())["session"]
        invalid: Any = {"type": "realtime", **update}
        await conn.session.update(session=invalid, event_id="evt_client_7")
        error = await events.until("error")
        await conn.session.update(session={"type": "realtime"})
        after = (await events.until("session.updated"))["session"]
    assert error["error"]["event_id"] == "evt_client_7"
    assert error["error"]["param"] == param
    assert error["error"]["type"] == "invalid_request_error"
    assert after["audio"] == created["audio"]
    assert after["truncation"] == created["truncation"]


async def test_bad_json_and_unknown_events_get_errors_and_the_socket_stays_usable(
    aclient: AsyncOpenAI, standin: StandinProcess
) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        events = RealtimeEvents(conn)
        await events.next()
        await conn.send_raw("{not json")
        bad_json = await events.until("error")
        await conn.send_raw(json.dumps({"type": "session.frobnicate", "event_id": "evt_x"}))
        unknown = await events.until("error")
        await conn.input_audio_buffer.commit(event_id="evt_empty")
        empty = await events.until("error")
        await conn.session.update(session={"type": "realtime", "instructions": "still here"})
        updated = await events.until("session.updated")
    assert bad_json["error"]["code"] == "invalid_json"
    assert unknown["error"]["event_id"] == "evt_x"
    assert unknown["error"]["param"] == "type"
    assert empty["error"]["code"] == "input_audio_buffer_commit_empty"
    assert empty["error"]["event_id"] == "evt_empty"
    assert updated["session"]["instructions"] == "still here"
    [record] = standin.realtime_sessions()
    first = record["events"][0]
    assert first["invalid_json"] == "{not json" and set(first) == {"invalid_json", "received_at"}
    assert [e["type"] for e in record["events"][1:]] == [
        "session.frobnicate",
        "input_audio_buffer.commit",
        "session.update",
    ]
    assert [s["type"] for s in record["sent"]] == ["session.created", "error", "error", "error", "session.updated"]


async def test_missing_api_key_is_refused_before_the_upgrade(standin: StandinProcess) -> None:
    url = standin.base_url.replace("http://", "ws://") + "/realtime?model=gpt-realtime"
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url):
            pass
    assert refused.value.response.status_code == 401
    assert "API key" in json.loads(refused.value.response.body or b"{}")["error"]["message"]
    assert standin.realtime_sessions() == []


async def test_reset_forgets_sessions_and_script(aclient: AsyncOpenAI, standin: StandinProcess) -> None:
    async with aclient.realtime.connect(model="gpt-realtime") as conn:
        await RealtimeEvents(conn).next()
    standin.realtime_script({"answer": "kept?"})
    assert len(standin.realtime_sessions()) == 1
    standin.realtime_reset()
    assert standin.realtime_sessions() == []
    assert standin.realtime_pending_script() == []
    standin.realtime_script({"answer": "again"})
    standin.reset()
    assert standin.realtime_pending_script() == []
