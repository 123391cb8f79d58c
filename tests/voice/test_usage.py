"""A call's model usage (issue #29 item 1): one priced ``model.usage`` per Realtime ``response.done``,
billed to the call on its channel, its audio tokens priced at the audio rates."""

from collections.abc import Callable
from typing import Any

from delegate.contracts.voice import TranscriptOut
from delegate.runtime.pricing import Usage, load_prices
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually
from tests.voice.peer import events_until


async def test_each_response_of_a_call_writes_one_priced_usage(
    make_system: Callable[..., System], connect: Any, standin: StandinProcess
) -> None:
    system = make_system("voice")
    bus, caller = await connect(system)
    standin.realtime_script({"transcript": "what time is it", "answer": "It is half past four."})
    assert (await caller.prepare("phone")).ok
    assert (await caller.attach()).ok
    await caller.say()
    await eventually(lambda: [t for t in caller.of(TranscriptOut) if t.role == "assistant" and t.final], "the answer")
    await caller.hang_up()

    events = await events_until(bus, caller.session_id, "span.closed")
    usage = [e for e in events if e.kind == "model.usage"]
    context = [e for e in events if e.kind == "context.usage"]
    assert len(usage) == len(context) >= 1  # one per response.done, as the topbar's figure
    for event, ctx in zip(usage, context, strict=True):
        p = event.payload
        assert (p["purpose"], p["cause_id"], event.channel) == ("voice", caller.session_id, "phone")
        assert p["response_id"] == ctx.payload["response_id"]
        assert p["model"] == "gpt-realtime" and p["audio_output_tokens"] > 0
        expected = load_prices().cost(p["model"], Usage(
            p["input_tokens"], p["cached_tokens"], p["output_tokens"], p["audio_input_tokens"],
            p["audio_output_tokens"]))
        assert expected is not None and p["cost_usd"] == expected
