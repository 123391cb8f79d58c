"""The voice service's state (is a call live, of which kind), as every open tab shows it.

The voice service announces each change on ``voice.live.state``; the gateway keeps the
latest one, asks for it once on connecting (a call may already be live), and asks again
when nothing is known (the voice service was down, or a call's relay lost it). A missing
answer is reused briefly, so a page polling /api/state with voice down never waits each time.
"""

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from delegate.contracts import topics
from delegate.contracts.voice import VoiceState, VoiceStateRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)

REQUEST_TIMEOUT_S = 1.0
MISSING_S = 5.0  # how long "voice did not answer" is reused


def voice_json(state: VoiceState) -> dict[str, Any]:
    return state.model_dump(mode="json", exclude={"error"})


class VoiceStateCache:
    def __init__(self) -> None:
        self.state: VoiceState | None = None
        self._missing_until = 0.0
        self._inflight: asyncio.Task[VoiceState | None] | None = None
        self._on_change: Callable[[VoiceState], Awaitable[None]] | None = None

    async def start(self, bus: Bus, on_change: Callable[[VoiceState], Awaitable[None]]) -> None:
        self._on_change = on_change
        await bus.subscribe(topics.VOICE_STATE, self._announced)
        bus.spawn(self._first_look(bus))

    async def _first_look(self, bus: Bus) -> None:
        await self.get(bus)

    async def _announced(self, state: VoiceState) -> None:
        changed = self.state != state
        self.state = state
        if changed and self._on_change is not None:
            await self._on_change(state)

    @property
    def current(self) -> dict[str, Any] | None:
        """What is known now, without asking anyone (the /chat ``state`` frame)."""
        return voice_json(self.state) if self.state is not None else None

    def forget(self) -> None:
        """The voice service stopped answering a call: what it last said may be stale."""
        self.state = None
        self._missing_until = 0.0

    async def get(self, bus: Bus) -> dict[str, Any] | None:
        """``VoiceState`` as JSON, or None when the voice service does not answer."""
        if self.state is not None:
            return voice_json(self.state)
        if time.monotonic() < self._missing_until:
            return None
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._ask(bus))
        task = self._inflight
        try:
            # shield: one caller going away must not cancel the others' answer
            state = await asyncio.shield(task)
        finally:
            if task.done() and self._inflight is task:
                self._inflight = None
        return voice_json(state) if state is not None else None

    async def _ask(self, bus: Bus) -> VoiceState | None:
        try:
            state = await bus.request(topics.VOICE_STATE_GET, VoiceStateRequest(), timeout=REQUEST_TIMEOUT_S)
        except (BusUnavailable, RemoteError) as exc:
            log.debug("voice state unavailable: %s", exc)
            self._missing_until = time.monotonic() + MISSING_S
            return None
        except Exception as exc:  # e.g. a reply from a newer voice service: detail, never a failed /api/state
            log.warning("voice state unreadable: %r", exc)
            self._missing_until = time.monotonic() + MISSING_S
            return None
        if self.state is None:  # an announcement that came meanwhile is newer
            self.state = state
        return self.state
