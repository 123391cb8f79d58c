"""A phone stream that goes silent ends as ``stream_lost`` and frees the voice lock (issue #32, F6).

Every piece is a real process (nats-server, ledger, voice, the gateway) with the OpenAI
stand-in speaking Realtime; the test plays Twilio: a signed ``/twiml``, the signed Media Stream,
2 s of caller audio, then nothing, while its WebSocket library keeps answering the gateway's
pings. It used to stay live for ever, holding the lock, so the owner's next call was refused busy.
"""

import time
from collections.abc import Callable

from tests.e2e.test_phone_call import start_call, voice_env
from tests.support.system import System, probe_bus
from tests.voice.peer import events_until, poll_state

MEDIA_TIMEOUT_S = 3.0


async def test_a_silent_call_ends_within_the_media_timeout_and_the_next_call_connects(
    make_system: Callable[..., System],
) -> None:
    system = make_system("voice", "gateway", fresh=True, **voice_env(VOICE_MEDIA_TIMEOUT_S=str(MEDIA_TIMEOUT_S)))
    async with probe_bus(system) as bus:
        call, stream = await start_call(system)
        await poll_state(bus, "live")
        await call.silence(2000)
        silent_since = time.monotonic()
        assert not call.closed.is_set()

        # Ended on our side within the timeout and 2 s: Twilio goes on to the TwiML's apology.
        assert await call.wait_closed(timeout=MEDIA_TIMEOUT_S + 2.0) == 1000
        assert time.monotonic() - silent_since <= MEDIA_TIMEOUT_S + 2.0
        events = await events_until(bus, stream.params["session"], "span.closed")
        ended = next(e for e in events if e.kind == "session.ended")
        assert ended.payload["reason"] == "stream_lost"
        await call.close()

        # The lock is free: the owner's next call is connected, not refused busy.
        await poll_state(bus, "idle")
        second, second_stream = await start_call(system)  # a <Connect><Stream>, not <Reject reason="busy">
        live = await poll_state(bus, "live")
        assert live.session_id == second_stream.params["session"] != stream.params["session"]
        await second.hang_up()
        await poll_state(bus, "idle")
