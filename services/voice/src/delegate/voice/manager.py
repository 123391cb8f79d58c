"""The voice service's face on the bus: prepare, state, and the one call at a time.

The voice lock is what enforces one call system-wide (two voice processes, or a prepare
racing another); ``current`` is only this process's view of it, the quick refusal for a second
prepare while a call is here (one already ending is waited for, briefly: see ``ENDING_WAIT_S``).
"""

import asyncio
import contextlib
import importlib
import logging
import sys
from typing import TYPE_CHECKING

from delegate.contracts import topics
from delegate.contracts.voice import PrepareReply, PrepareSession, VoiceState, VoiceStateRequest
from delegate.runtime.bus import Bus
from delegate.runtime.hard_stop import owner_turn_refusal
from delegate.runtime.openai_client import import_sdk

from .ledger import VoiceLedger
from .lock import VoiceLock
from .presets import PresetStore
from .settings import Settings

if TYPE_CHECKING:  # calls and the OpenAI SDK load with the first call, not at start
    from openai import AsyncOpenAI

    from .calls import Call

log = logging.getLogger(__name__)

# How long prepare waits for the Realtime socket before answering: a dead endpoint is then
# "unavailable" (the caller hears a polite refusal) instead of a stream that drops.
CONNECT_WAIT_S = 3.0
# How long a prepare waits for a call already ending here to let go (its last events written, the
# lock released): hanging up and calling straight back is not "busy". Short: with CONNECT_WAIT_S
# it stays inside the gateway's 5 s wait for the prepare's reply.
ENDING_WAIT_S = 1.5
PRESETS_EVERY_S = 2.0


class Calls:
    """This process's calls: prepares them (one at a time), reports the voice state, ends the
    current one at stop."""

    def __init__(
        self, settings: Settings, bus: Bus, presets: PresetStore, instance: str
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.ledger = VoiceLedger(bus)
        self._client: AsyncOpenAI | None = None
        self.presets = presets
        self.instance = instance
        self.current: Call | None = None
        self._last_state: VoiceState | None = None

    def client(self) -> "AsyncOpenAI":
        """The Realtime client, made with the first call: the SDK loads then, not at start."""
        if self._client is None:
            import_sdk()  # at once when a call has loaded it already (load_call_code)
            from openai import AsyncOpenAI

            # No retries inside a call: a Realtime socket that fails ends the call, cleanly.
            # Its key and base URL from our settings, not the (shared) process environment.
            self._client = AsyncOpenAI(max_retries=0, **(self.settings.openai_client_options() or {}))
        return self._client

    async def load_call_code(self) -> None:
        """Import what a call runs on (the SDK, ~1 s on a busy machine) in a thread, before the
        lock is taken: imported on the event loop, it held up the lock's renewals, and a lock
        whose entry expired meanwhile ended the call it had just prepared."""
        if "delegate.voice.calls" not in sys.modules:
            await asyncio.to_thread(_import_call_code)

    async def close_client(self) -> None:
        if self._client is not None:
            await self._client.close()

    async def prepare(
        self, req: PrepareSession, *, reason: str | None = None
    ) -> tuple[PrepareReply, "Call | None"]:
        """The reply, and the call when one was prepared (the outbound call needs it)."""
        self.presets.refresh()
        preset = self.presets.get(req.preset)
        if preset is None:
            known = ", ".join(sorted(self.presets.presets()))
            message = f"no voice preset {req.preset!r} (have: {known})"
            return PrepareReply(ok=False, reason="bad_preset", message=message), None
        if not await self._free():
            return self._busy(), None
        if req.direction == "inbound" and self.settings.budget_hard_stop_owner:
            # A call the owner starts; calls we place come from activations, held by the broker.
            refusal = await owner_turn_refusal(self.bus)
            if refusal is not None:
                return PrepareReply(ok=False, reason="budget", message=refusal), None
        await self.load_call_code()
        lock = VoiceLock(self.bus.js, self.instance, ttl=self.settings.voice_lock_ttl_s, replicas=self.bus.replicas)
        if not await lock.acquire():
            return self._busy(), None
        if not self._idle():  # another prepare here won while we waited for the lock
            await lock.release()
            return self._busy(), None
        from .calls import Call

        call = Call(
            self.settings, self.bus, self.ledger, self.client(), lock, kind=req.kind, direction=req.direction,
            preset=preset, call_sid=req.call_sid, caller=req.caller, reason=reason, on_change=self.publish_state,
        )
        self.current = call
        await call.start()
        self.bus.spawn(self._forget(call))
        await self.publish_state()
        with contextlib.suppress(TimeoutError):  # still opening after that: the stream's audio waits for it
            await asyncio.wait_for(call.connect_done.wait(), CONNECT_WAIT_S)
        if call.connect_error:
            call.request_end("realtime_lost", call.connect_error)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(call.done.wait(), 5.0)  # the lock is free again for a retry
            return PrepareReply(ok=False, reason="unavailable", message="the voice model cannot be reached"), None
        log.info("prepared call %s (%s %s, preset %s)", call.id, req.direction, req.kind, preset.name)
        return PrepareReply(ok=True, session_id=call.id, token=call.token), call

    def _idle(self) -> bool:
        call = self.current
        return call is None or call.released.is_set()

    async def _free(self) -> bool:
        """No call holds this process, once one that is already ending has let go (within
        ENDING_WAIT_S): its span's close is committed a moment before its lock is released, and
        a client seeing it may call back at once."""
        call = self.current
        if call is not None and call.ending and not call.released.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(call.released.wait(), ENDING_WAIT_S)
        return self._idle()

    def _busy(self) -> PrepareReply:
        return PrepareReply(ok=False, reason="busy", message="another voice or phone call is live")

    async def _forget(self, call: "Call") -> None:
        await call.done.wait()
        if self.current is call:
            self.current = None
        await self.publish_state()

    async def on_prepare(self, req: PrepareSession) -> PrepareReply:
        reply, _ = await self.prepare(req)
        return reply

    async def on_state(self, _: VoiceStateRequest) -> VoiceState:
        self.presets.refresh()
        return self.state()

    def state(self) -> VoiceState:
        presets = self.presets.presets()
        common = {
            "presets": sorted(presets),
            "default_preset": self.presets.default().name,
            "preset_errors": dict(self.presets.errors),
        }
        call = self.current
        if call is None:
            return VoiceState(**common)
        return VoiceState(
            active=True, session_id=call.id, kind=call.kind, status=call.status,
            started_at=call.started_at, caller=call.caller, preset=call.preset.name, **common,
        )

    def describe(self) -> str:
        """The ping's detail: what this process is doing now."""
        call = self.current
        if call is None:
            return "idle"
        what = "phone call" if call.kind == "phone" else "browser voice call"
        return f"{call.status} {what}" if call.status != "live" else f"live {what}"

    async def publish_state(self) -> None:
        state = self.state()
        if state != self._last_state:
            self._last_state = state
            await self.bus.emit(topics.VOICE_STATE, state)

    async def watch_presets(self) -> None:
        """Hot reload: a changed preset file shows in the state without anyone asking."""
        while True:
            await asyncio.sleep(PRESETS_EVERY_S)
            try:
                if self.presets.refresh():
                    await self.publish_state()
            except Exception:
                log.exception("voice preset reload failed")

    async def close(self) -> None:
        call = self.current
        if call is not None:
            call.request_end("error", "the voice service was stopped")
            try:
                await asyncio.wait_for(call.done.wait(), 15.0)
            except TimeoutError:
                log.warning("call %s did not finish ending in time", call.id)


def _import_call_code() -> None:
    import_sdk()
    importlib.import_module("delegate.voice.calls")
