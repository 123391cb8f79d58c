"""Voice state in every open tab: ``/api/state``'s ``"voice"``, the /chat ``state`` frame's
``"voice"``, and a ``{"type":"voice"}`` frame to every /chat client whenever it changes.

The voice service (its ``voice.cmd.state`` and ``voice.live.state``) and the agent (its
``agent.cmd.state``) are played by the test over the real bus.
"""

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.messages import AgentCommand, AgentState, Usage
from delegate.contracts.voice import VoiceState
from delegate.launcher.procs import NatsServer

from .helpers import PATIENT_S, auth, connect, recv_until
from .voice_peer import OWNER, SESSION, VoiceRig, voice_rig


@pytest.fixture
async def rig(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[VoiceRig]:
    async with voice_rig(nats_server, tmp_path) as r:
        async def agent_state(_: AgentCommand) -> AgentState:
            return AgentState(usage=Usage(compact_threshold=200_000))

        await r.bus.serve(topics.AGENT_STATE_GET, agent_state)
        yield r


def as_json(state: VoiceState) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude={"error"})


async def api_state(rig: VoiceRig) -> dict[str, Any]:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=rig.gw.http) as c:
        r = await c.get("/api/state", headers=auth())
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_call_starting_is_pushed_to_every_chat_tab_and_shown_in_api_state(rig: VoiceRig) -> None:
    idle = as_json(rig.voice.state)
    assert (await api_state(rig))["voice"] == idle
    tabs = [await connect(rig.gw.ws) for _ in range(2)]
    for tab in tabs:
        first_state = (await recv_until(tab, lambda f: f["type"] == "state"))[-1]
        assert first_state["voice"] == idle

    live = VoiceState(
        active=True, session_id=SESSION, kind="phone", status="live", started_at=datetime.now(UTC), caller=OWNER,
        presets=["calm"], default_preset="calm",
    )
    await rig.voice.announce(live)
    for tab in tabs:
        frame = (await recv_until(tab, lambda f: f["type"] == "voice"))[-1]
        assert frame == {"type": "voice", "state": as_json(live)}
    assert (await api_state(rig))["voice"] == as_json(live)

    # the agent's own state frames carry the voice state too
    await rig.bus.emit(topics.AGENT_STATE, AgentState(usage=Usage(compact_threshold=200_000), busy=True))
    for tab in tabs:
        frame = (await recv_until(tab, lambda f: f["type"] == "state" and f["busy"]))[-1]
        assert frame["voice"]["status"] == "live"
        await tab.close()


async def test_voice_down_is_null_in_api_state_not_a_failure(nats_server: NatsServer, tmp_path: Path) -> None:
    async with voice_rig(nats_server, tmp_path, voice_running=False) as rig:
        async def agent_state(_: AgentCommand) -> AgentState:
            return AgentState(usage=Usage(compact_threshold=200_000))

        await rig.bus.serve(topics.AGENT_STATE_GET, agent_state)
        body = await api_state(rig)
        assert body["voice"] is None
        assert body["usage"]["compact_threshold"] == 200_000
