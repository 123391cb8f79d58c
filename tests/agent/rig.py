"""A test-side view of the bus for agent tests: send inputs, watch what the agent and ledger say.

The agent and the ledger run as real processes (``System``); the OpenAI stand-in too. The
probe only publishes what a real producer would (the gateway's UserInput, the inner plane's
IdleCheckInput or a context.capsule event) and watches live subjects. Waits poll a condition
with a deadline, never a fixed sleep.
"""

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import (
    AgentCommand,
    AgentState,
    CommandReply,
    Delta,
    QueryRequest,
    UserInput,
)
from delegate.ledger.store import sqlite_path
from delegate.runtime.bus import Bus
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import ARTIFACT_LOG_CHARS, System
from tests.support.waiting import eventually

T = TypeVar("T")

LEASE_TTL = 3.0


def agent_env(standin: StandinProcess, **extra: str) -> dict[str, str]:
    """Environment for real agent processes pointed at the stand-in, with test-sized timings."""
    return {
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "OPENAI_MAX_RETRIES": "1",
        "OPENAI_TIMEOUT": "20",
        "AGENT_ACK_WAIT": "4",
        # A ttl that survives two loaded shared cores (a renewal late by a second or two must
        # not depose a healthy leader); renewed every third of it.
        "AGENT_LEASE_TTL": str(LEASE_TTL),
        "AGENT_LEASE_RENEW": str(LEASE_TTL / 3),
        **extra,
    }


TERM_COLUMNS = ("id", "holder", "started_at", "started_seq", "supersedes", "ended_at", "end_reason")


def term_rows(system: System) -> list[dict[str, Any]]:
    """The ledger's terms table, read as an operator would (read-only, beside the writer)."""
    path = sqlite_path(system.runtime)
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        found = conn.execute(f"SELECT {', '.join(TERM_COLUMNS)} FROM terms ORDER BY started_seq").fetchall()
    return [dict(zip(TERM_COLUMNS, row, strict=True)) for row in found]


def dump_on_failure(system: System, standin: StandinProcess, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    logs = system.dump_logs(ARTIFACT_LOG_CHARS) + "\n===== standin\n" + standin.log_text()[-ARTIFACT_LOG_CHARS:]
    (out / "services.log").write_text(logs)


class Probe:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.events: list[Event] = []
        # The agent's leadership terms (term.*): the process's bookkeeping, not the conversation,
        # so what a turn wrote is checked without caring whether a start landed before we listened.
        self.terms: list[Event] = []
        self.deltas: list[Delta] = []
        self.states: list[AgentState] = []

    @classmethod
    async def open(cls, url: str) -> "Probe":
        probe = cls(await Bus.connect(url, "test-probe"))
        await probe.bus.ensure_streams(all_owners=True)
        await probe.bus.subscribe(topics.LEDGER_COMMITTED, probe._on_event)
        await probe.bus.subscribe(topics.AGENT_DELTA, probe._on_delta)
        await probe.bus.subscribe(topics.AGENT_STATE, probe._on_state)
        return probe

    async def _on_event(self, event: Event) -> None:
        seen = self.terms if event.kind.startswith("term.") else self.events
        if all(e.seq != event.seq for e in seen[-50:]):
            seen.append(event)

    async def _on_delta(self, delta: Delta) -> None:
        self.deltas.append(delta)

    async def _on_state(self, state: AgentState) -> None:
        self.states.append(state)

    async def close(self) -> None:
        await self.bus.close()

    # ---- acting like producers ------------------------------------------------------------

    async def send(self, text: str, channel: Any = "text", **fields: Any) -> UserInput:
        msg = UserInput(text=text, channel=channel, **fields)
        await self.bus.publish(topics.AGENT_INPUT, msg, msg_id=msg.id)
        return msg

    async def publish_input(self, msg: Any) -> None:
        await self.bus.publish(topics.AGENT_INPUT, msg, msg_id=msg.id)

    async def append(self, event: Event) -> None:
        await self.bus.publish(topics.ledger_append("test"), event, msg_id=event.id)

    async def state(self) -> AgentState:
        return await self.bus.request(topics.AGENT_STATE_GET, AgentCommand())

    async def compact(self) -> CommandReply:
        return await self.bus.request(topics.AGENT_COMPACT, AgentCommand())

    async def end(self) -> CommandReply:
        return await self.bus.request(topics.AGENT_END, AgentCommand())

    async def ledger_events(self, **query: Any) -> list[Event]:
        """Everything committed that matches, by seq, straight from the ledger."""
        found: list[Event] = []
        after = query.pop("after_seq", 0)
        while True:
            reply = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=after, limit=1000, **query))
            found += reply.events
            if not reply.more or not reply.events:
                return found
            after = reply.events[-1].seq or after

    # ---- waiting ----------------------------------------------------------------------------

    async def wait_for(self, check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        """``eventually``, with the last committed events in the failure (what the agent did)."""
        return await eventually(check, what, timeout, explain=lambda: f"last events: {self.events[-5:]}")

    def outcome(self, turn_id: str) -> Event | None:
        """The assistant message or turn.failed answering an input, once committed."""
        for event in self.events:
            if event.parent_id == turn_id and (
                (event.kind == "message" and event.role == "assistant") or event.kind == "turn.failed"
            ):
                return event
        return None

    async def answer(self, turn_id: str, timeout: float = 40.0) -> Event:
        return await self.wait_for(lambda: self.outcome(turn_id), f"the answer to {turn_id}", timeout)

    def of_kind(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    def turn_deltas(self, turn_id: str) -> list[Delta]:
        return [d for d in self.deltas if d.turn_id == turn_id]

    def text_of_last_attempt(self, turn_id: str) -> str:
        deltas = self.turn_deltas(turn_id)
        if not deltas:
            return ""
        last = max(d.attempt for d in deltas)
        return "".join(d.text for d in sorted((d for d in deltas if d.attempt == last), key=lambda d: d.index))


def response_bodies(standin: StandinProcess) -> list[dict[str, Any]]:
    return [r["body"] for r in standin.response_requests()]


def input_texts(body: dict[str, Any]) -> list[str]:
    """The text of every message item in a request's input (for assertions)."""
    items = body.get("input")
    if isinstance(items, str):
        return [items]
    texts: list[str] = []
    for item in items or []:
        content = item.get("content")
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts.extend(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return texts
