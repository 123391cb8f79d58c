"""``python -m delegate.voice``: the Realtime bridge for phone calls and browser voice.

Serves ``voice.cmd.prepare`` (take the voice lock, pre-warm a call), ``voice.cmd.state``,
``voice.cmd.call_owner`` and ping, and emits ``voice.live.state`` whenever a call starts,
goes live or ends. Each call serves its own attach subject and live relay (``calls``).
"""

import asyncio
import socket

from delegate.contracts import topics
from delegate.contracts.messages import Ping, Pong
from delegate.runtime.bus import Bus
from delegate.runtime.service import run_service
from delegate.runtime.settings_check import load_settings

from .manager import Calls
from .outbound_call import OwnerCaller
from .presets import PresetStore
from .settings import Settings
from .voicemail import AnsweredByConsumer

SERVICE = "voice"


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    instance = settings.instance_name or socket.gethostname()
    bus = await Bus.connect(settings.nats_url, f"{SERVICE}:{instance}", settings=settings)
    presets = PresetStore(settings.runtime_data_dir)
    presets.refresh()
    calls = Calls(settings, bus, presets, instance)
    if settings.openai_client_options() is None:
        # The Realtime client (and the OpenAI SDK) is made with the first call; without a
        # key it is made now, so the SDK refuses at start, as it always has.
        calls.client()
    caller = OwnerCaller(settings, calls)
    try:
        await bus.ensure_streams()
        await bus.serve(topics.VOICE_PREPARE, calls.on_prepare)
        await bus.serve(topics.VOICE_STATE_GET, calls.on_state)
        await bus.serve(topics.VOICE_CALL_OWNER, caller.on_call_owner)

        async def pong(_: Ping) -> Pong:
            return Pong(service=SERVICE, instance=bus.service, ready=True, detail=calls.describe())

        await bus.serve(topics.PINGS[SERVICE], pong)
        bus.spawn(calls.watch_presets())
        bus.spawn(AnsweredByConsumer(settings, bus, calls).run(stop))
        await calls.publish_state()
        await stop.wait()
        await calls.close()
    finally:
        await calls.close_client()
        await bus.close()


def run() -> None:
    run_service(SERVICE, load_settings(SERVICE, Settings), serve)
