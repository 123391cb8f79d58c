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


async def early_in_a_period(period_s: float, min_left: float, *, fresh: bool = False) -> float:
    """Wait (if need be) until at least ``min_left`` seconds of the current BUDGET_PERIOD_S
    window remain; returns its end (epoch seconds). ``fresh``: in a window that begins after
    this call, so nothing said before it (a notice told once per period) belongs to it."""
    began = time.time() // period_s

    async def room() -> float | None:
        now = time.time()
        if fresh and now // period_s == began:
            return None
        end = (now // period_s + 1) * period_s
        return end if end - now >= min_left else None

    return await eventually(room, "a fresh budget period", period_s + 5)


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
