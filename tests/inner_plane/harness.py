"""The test plays the producer of committed history: it appends events through the real ledger
and watches what the real inner-plane process does (AGENT stream, notices, ledger, stand-in)."""

import json
import time
from pathlib import Path
from typing import Any

from delegate.contracts import streams, topics
from delegate.contracts.events import Channel, Event, Payload, Role, make_event
from delegate.contracts.messages import (
    AGENT_INPUT_ADAPTER,
    GetRequest,
    LiveNotice,
    QueryRequest,
)
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

MEMORY_MARK = "extract durable memories"  # in the inner plane's memory instructions
CAPSULE_MARK = "continuity capsule"  # in its capsule instructions


def plane_env(standin: StandinProcess, **overrides: str) -> dict[str, str]:
    env = {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "IDLE_SPAN_SECONDS": "1.5",
        "COMPACT_THRESHOLD": "1000",
        "CAPSULE_THRESHOLD": "0.5",
        "INNER_RETRY_SECONDS": "0.5",
        "INNER_RESYNC_SECONDS": "1",
    }
    env.update(overrides)
    return env


def period_from_now(length_s: float) -> dict[str, str]:
    """The BUDGET_* settings of a budget period that begins now and lasts ``length_s``: a service
    started with them is at the start of a fresh period at once, instead of waiting for the next
    whole multiple of the length, and the period's keys are its origin's, so nothing told before
    (a notice is told once per period) belongs to it."""
    return {"BUDGET_PERIOD_S": str(length_s), "BUDGET_PERIOD_ORIGIN": repr(time.time())}


# The least a period cut short leaves for a service to start again in it and be looked at.
ROOM_MIN_S = 5.0


def room_for_a_start(took_s: float) -> float:
    """What to leave of a period cut short (``period_cut_to``) for a service to start again in it
    and be looked at: three starts as long as one that just took ``took_s`` here (a measure of
    the machine's load now), at least ROOM_MIN_S."""
    return max(ROOM_MIN_S, 3 * took_s)


def period_cut_to(settings: dict[str, str], left_s: float) -> tuple[dict[str, str], float]:
    """The same period (its origin, so its key) cut to end ``left_s`` seconds from now, for a
    service started again inside it; and that end (epoch seconds). A period sized for the slowest
    machine then ends once the work it had to hold is done, not when its length runs out."""
    origin = float(settings["BUDGET_PERIOD_ORIGIN"])
    length = time.time() + left_s - origin
    assert length <= float(settings["BUDGET_PERIOD_S"]), "the period ended before it was cut"
    return {"BUDGET_PERIOD_S": repr(length), "BUDGET_PERIOD_ORIGIN": settings["BUDGET_PERIOD_ORIGIN"]}, origin + length


class Harness:
    def __init__(self, system: System, bus: Bus) -> None:
        self.system = system
        self.bus = bus
        self.notices: list[LiveNotice] = []

    @classmethod
    async def connect(cls, system: System) -> "Harness":
        assert system.nats is not None
        bus = await Bus.connect(system.nats.url, "inner-plane-test")
        harness = cls(system, bus)
        await bus.subscribe(topics.INNER_NOTICE, harness._on_notice)
        return harness

    async def stand_in_for_the_agent(self) -> None:
        """Create the AGENT stream, which the agent owns: without the agent, the test plays it."""
        await self.bus.ensure_streams([spec for spec in streams.STREAMS if spec.owner == "agent"])

    async def _on_notice(self, notice: LiveNotice) -> None:
        self.notices.append(notice)

    async def close(self) -> None:
        if not self.bus.nc.is_closed:
            await self.bus.nc.close()

    # ---- producing history --------------------------------------------------------------

    async def append(
        self,
        payload: Payload,
        *,
        conversation_id: str | None,
        span_id: str | None,
        channel: Channel = "text",
        role: Role | None = None,
        parent_id: str | None = None,
        kind: str | None = None,
    ) -> Event:
        """Publish one event and wait until the ledger committed it; returns it with its seq."""
        event = make_event(
            payload,
            kind=kind,
            conversation_id=conversation_id,
            span_id=span_id,
            channel=channel,
            role=role,
            parent_id=parent_id,
        )
        await self.bus.publish(topics.ledger_append("test"), event)
        return await self.committed(event.id)

    async def committed(self, event_id: str, timeout: float = 30.0) -> Event:
        async def get() -> Event | None:
            try:
                reply = await self.bus.request(topics.LEDGER_GET, GetRequest(id=event_id))
            except (RemoteError, BusUnavailable):
                return None
            return reply.event if reply.event is not None and reply.event.seq is not None else None

        return await eventually(get, f"event {event_id} to be committed", timeout)

    # ---- observing ------------------------------------------------------------------------

    async def events(self, **query: Any) -> list[Event]:
        out: list[Event] = []
        after = 0
        while True:
            reply = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, limit=1000, **query))
            out.extend(reply.events)
            if not reply.more or not reply.events:
                return out
            after = reply.events[-1].seq or after

    async def stream_messages(self, stream: str) -> list[Any]:
        """Every message stored in ``stream``, oldest first (nobody consumes it here)."""
        info = await self.bus.js.stream_info(stream)
        if not info.state.messages:
            return []
        return [await self.bus.js.get_msg(stream, seq) for seq in range(info.state.first_seq, info.state.last_seq + 1)]

    async def agent_inputs(self) -> list[Any]:
        """Everything in the AGENT stream, decoded, oldest first."""
        return [AGENT_INPUT_ADAPTER.validate_json(msg.data) for msg in await self.stream_messages("AGENT")]

    async def idle_checks(self, span_id: str | None = None) -> list[Any]:
        return [m for m in await self.agent_inputs() if m.type == "idle_check" and span_id in (None, m.span_id)]

    def processed_seq(self) -> int:
        """The inner plane's durable progress (a barrier: it has seen everything up to here)."""
        path = Path(self.system.runtime) / "inner-plane" / "state.json"
        try:
            return int(json.loads(path.read_text())["last_seq"])
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return 0

    def fired_seq(self, span_id: str) -> int | None:
        """The last activity an idle check was sent for, as the inner plane's state file keeps it."""
        path = Path(self.system.runtime) / "inner-plane" / "state.json"
        try:
            span = json.loads(path.read_text())["spans"].get(span_id) or {}
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return None
        return span.get("fired_seq")

    async def processed(self, seq: int) -> None:
        async def done() -> bool:
            return self.processed_seq() >= seq

        await eventually(done, f"the inner plane to process seq {seq}")


def restart_plane(system: System, base: dict[str, str], *, keep_state: bool = True, **env: str) -> None:
    """A new inner-plane process with ``env`` on top of ``base`` (SIGKILL: nothing is saved on the way
    out; without ``keep_state`` its state file is lost as well and rebuilt from the ledger)."""
    system.extra_env.update({**base, **env})
    system.kill("inner-plane")
    if not keep_state:
        (system.runtime / "inner-plane" / "state.json").unlink()
    system.start("inner-plane")


def model_requests(standin: StandinProcess, mark: str) -> list[dict[str, Any]]:
    """The stand-in's recorded Responses calls whose instructions carry ``mark``."""
    return [
        r for r in standin.response_requests() if mark.lower() in str(r["body"].get("instructions", "")).lower()
    ]
