"""The voice service's side of the bus, played by a test: the gateway's voice routes against it.

``FakeVoice`` answers ``voice.cmd.prepare`` and ``voice.cmd.attach.<sid>``, reads
``voice.live.in.<sid>`` and publishes on ``voice.live.out.<sid>``, over the real nats-server,
as the voice service does (its wire, not its behaviour: the whole system with the real voice
service is the e2e tests' business). ``voice_rig`` runs the real gateway beside it.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from delegate.contracts import topics
from delegate.contracts.voice import (
    AttachReply,
    AttachSession,
    HeartbeatIn,
    HeartbeatOut,
    PrepareReply,
    PrepareSession,
    VoiceState,
    VoiceStateRequest,
)
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.support.nats import role_url
from tests.support.twilio_media import FakeTwilioCall

from .helpers import Gateway, gateway_settings, running_gateway

AUTH_TOKEN = "test_auth_token_0123"
PUBLIC = "https://delegate.example.test"
STREAM_URL = "wss://delegate.example.test/call"
OWNER = "+15550001111"
STRANGER = "+15550009999"
TWILIO_NUMBER = "+15550002222"
SESSION = "0193f0a2-7b1c-7d3e-9f00-5e55c0de0001"
TOKEN = "one-time-token_abc123"
VOICE_LOST_FAST_S = 1.0  # voice_lost_after_s in the rig of a test that stops voice's heartbeats


@dataclass
class FakeVoice:
    bus: Bus
    session_id: str = SESSION
    token: str = TOKEN
    refuse: str | None = None  # a PrepareReply reason: busy, unavailable, bad_preset
    audio_format: str = "pcmu"
    heartbeat_s: float = 0.2
    prepares: list[PrepareSession] = field(default_factory=list)
    attaches: list[AttachSession] = field(default_factory=list)
    inbox: list[Any] = field(default_factory=list)  # every VoiceIn but heartbeats, in order
    heartbeats_in: int = 0
    state: VoiceState = field(default_factory=lambda: VoiceState(presets=["calm"], default_preset="calm"))

    def __post_init__(self) -> None:
        self._beating: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.out = topics.voice_out(self.session_id)

    async def start(self) -> "FakeVoice":
        await self.bus.serve(topics.VOICE_PREPARE, self._prepare)
        await self.bus.serve(topics.voice_attach(self.session_id), self._attach)
        await self.bus.subscribe(topics.voice_in(self.session_id), self._in)
        await self.bus.serve(topics.VOICE_STATE_GET, self._state)
        await self.bus.nc.flush()
        return self

    async def _prepare(self, req: PrepareSession) -> PrepareReply:
        self.prepares.append(req)
        if self.refuse is not None:
            return PrepareReply(ok=False, reason=self.refuse, message=f"voice says {self.refuse}")
        return PrepareReply(ok=True, session_id=self.session_id, token=self.token)

    async def _state(self, _: VoiceStateRequest) -> VoiceState:
        return self.state

    async def announce(self, state: VoiceState) -> None:
        """What the voice service emits whenever its state changes."""
        self.state = state
        await self.bus.emit(topics.VOICE_STATE, state)
        await self.bus.nc.flush()

    async def _attach(self, req: AttachSession) -> AttachReply:
        self.attaches.append(req)
        if req.token != self.token:
            return AttachReply(ok=False, reason="bad_token", message="that token is not this session's")
        self.start_heartbeats()
        return AttachReply(ok=True, audio_format=self.audio_format)

    async def _in(self, msg: Any) -> None:
        if isinstance(msg, HeartbeatIn):
            self.heartbeats_in += 1
        else:
            self.inbox.append(msg)
        self._changed.set()

    async def send(self, *msgs: Any) -> None:
        for msg in msgs:
            await self.bus.emit(self.out, msg)
        await self.bus.nc.flush()

    def start_heartbeats(self) -> None:
        if self._beating is None:
            self._beating = asyncio.create_task(self._beat())

    async def stop_heartbeats(self) -> None:
        """The voice process "dies": nothing more comes from it."""
        if self._beating is not None:
            self._beating.cancel()
            await asyncio.gather(self._beating, return_exceptions=True)
            self._beating = None

    async def _beat(self) -> None:
        while True:
            await self.bus.emit(self.out, HeartbeatOut())
            await asyncio.sleep(self.heartbeat_s)

    def of_type(self, kind: str) -> list[Any]:
        return [m for m in self.inbox if m.type == kind]

    async def wait_for(self, predicate: Callable[["FakeVoice"], bool], timeout: float = 20.0,
                       what: str = "condition") -> None:
        # Not tests.support.waiting.eventually: woken by each message in (self._changed), not polled.
        deadline = time.monotonic() + timeout
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                seen = [m.type for m in self.inbox][-10:]
                raise AssertionError(f"fake voice: timed out waiting for {what}; the last messages in: {seen}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))


@dataclass
class VoiceRig:
    bus: Bus  # the test's own identity
    gw: Gateway
    voice: FakeVoice

    def twilio(self, **kwargs: Any) -> FakeTwilioCall:
        return FakeTwilioCall(f"{self.gw.ws}/call", STREAM_URL, AUTH_TOKEN, **kwargs)


@asynccontextmanager
async def voice_rig(
    nats_server: NatsServer, root: Path, *, voice_running: bool = True, **overrides: Any
) -> AsyncIterator[VoiceRig]:
    bus = await Bus.connect(nats_server.url, "test")
    await bus.ensure_streams(all_owners=True)
    values: dict[str, Any] = {
        "public_base_url": PUBLIC, "twilio_auth_token": AUTH_TOKEN, "owner_phone": OWNER,
        # A lost voice service is noticed quickly only where a test is about that (VOICE_LOST_FAST_S):
        # elsewhere 1 s without a heartbeat ended calls under CPU starvation, mid-test.
        "voice_heartbeat_s": 0.2, "voice_lost_after_s": 30.0,
        **overrides,
    }
    (root / "client").mkdir(exist_ok=True)
    voice = FakeVoice(bus)
    if voice_running:
        await voice.start()
    try:
        async with running_gateway(gateway_settings(role_url(nats_server, "gateway"), root, **values)) as gw:
            yield VoiceRig(bus, gw, voice)
    finally:
        await voice.stop_heartbeats()
        await bus.close()
