"""A user message's memory search starts as the input is published, before the lease read.

The model request waits for memory; the search then overlaps the input's storing and delivery,
the lease read and the turn's setup instead of following them. What the wire shows: the search
goes out before the read that takes the input on, once per turn (the turn uses the search it
started, not a second one), even before the input is delivered to the agent at all, and it
excludes the newest verbatim turns when there are more than a request may name.
"""

import json
from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest
from nats.aio.msg import Msg

from delegate.agent.retrieval import Retrieval
from delegate.agent.settings import Settings
from delegate.contracts import streams, subjects
from delegate.contracts.ids import utcnow
from delegate.runtime.memory_context import MAX_EXCLUDED
from tests.agent.memory_rig import ON_TIME, SERVICES
from tests.agent.rig import Probe
from tests.support.standin import StandinProcess
from tests.support.system import System

LEASE_READS = (
    f"$JS.API.DIRECT.GET.KV_{subjects.AGENT_LEASE_BUCKET}.>",
    f"$JS.API.DIRECT.GET.KV_{subjects.AGENT_LEASE_BUCKET}",
    f"$JS.API.STREAM.MSG.GET.KV_{subjects.AGENT_LEASE_BUCKET}",
)


@pytest.mark.integration
async def test_the_search_goes_out_before_the_lease_read_once_per_turn(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    first = await probe.send("Hello, is anyone there?")  # the chain exists from here on
    assert (await probe.answer(first.id)).kind == "message"

    wire: list[tuple[str, str]] = []

    async def on_search(msg: Msg) -> None:
        wire.append(("search", json.loads(msg.data)["query"]))

    async def on_read(msg: Msg) -> None:
        wire.append(("lease read", ""))

    nc = probe.bus.nc
    await nc.subscribe(subjects.MEMORY_SEARCH, cb=on_search)
    for subject in LEASE_READS:
        await nc.subscribe(subject, cb=on_read)
    await nc.flush()

    for text in ("What did I plan for Saturday?", "And for Sunday?"):
        wire.clear()
        turn = await probe.send(text)
        assert (await probe.answer(turn.id)).kind == "message"
        await probe.wait_for(lambda: len(wire) >= 3, "the turn's search and both lease reads on the wire")
        # Taken on after a read, acknowledged after another; the search precedes both.
        assert wire == [("search", text), ("lease read", ""), ("lease read", "")], wire


@pytest.mark.integration
async def test_the_search_starts_before_the_input_is_delivered(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]], standin: StandinProcess
) -> None:
    system = make_system(**ON_TIME).start(*SERVICES)
    probe = await probe_for(system)
    first = await probe.send("Hello, is anyone there?")
    assert (await probe.answer(first.id)).kind == "message"

    searches: list[str] = []

    async def on_search(msg: Msg) -> None:
        searches.append(json.loads(msg.data)["query"])

    await probe.bus.nc.subscribe(subjects.MEMORY_SEARCH, cb=on_search)
    await probe.bus.nc.flush()
    jsm = probe.bus.js
    # The agent's durable consumer delivers nothing while paused: only the live publish is heard.
    until = (utcnow() + timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    await jsm.pause_consumer("AGENT", streams.AGENT_WORKER, until)
    text = "What did I plan for Saturday?"
    turn = await probe.send(text)
    await probe.wait_for(lambda: searches, "the search, with the input not delivered")
    assert probe.outcome(turn.id) is None and not [e for e in probe.events if e.id == turn.id]

    await jsm.resume_consumer("AGENT", streams.AGENT_WORKER)
    assert (await probe.answer(turn.id)).kind == "message"
    assert searches == [text]  # the turn took over the search it heard of, and asked no second one


def test_a_search_excludes_the_newest_verbatim_turns() -> None:
    retrieval = Retrieval(None, None, Settings(_env_file=None, nats_url="nats://127.0.0.1:4222"))  # type: ignore[arg-type]
    carried = [f"turn-{i:04d}" for i in range(MAX_EXCLUDED + 100)]
    for event_id in carried:
        retrieval.carry(event_id, f"text of {event_id}")
    retrieval.carry(carried[0], "said again")  # carried again: among the newest now

    request = retrieval.request_for("now", "what about the weekend", "turn")
    assert request is not None
    assert request.exclude_event_ids == [*carried[102:], carried[0], "now"]
