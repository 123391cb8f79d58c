"""Memory extraction: for each committed checkpoint, exactly its range of turns, once."""

import asyncio
import json
import logging
import re
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Checkpoint, Event, MemoryExtracted, make_event
from delegate.contracts.messages import QueryRequest
from delegate.runtime.bus import BusUnavailable, RemoteError
from delegate.runtime.metering import Cause

from .budget_watch import background_hold, wait_out
from .context import Context, derived_id
from .ledger import exists, read_range
from .model import ModelFailed
from .prompts import MEMORY_INSTRUCTIONS, turn_line
from .state import CheckpointRef

log = logging.getLogger(__name__)


def memory_event_id(checkpoint_id: str) -> str:
    """One memory.extracted per checkpoint: a redo after a crash reuses the id and is deduped."""
    return derived_id("memory.extracted", checkpoint_id)


class MemoryExtractor:
    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.wake = asyncio.Event()

    def on_event(self, event: Event) -> None:
        state = self.ctx.state
        assert event.seq is not None
        if (cp := event.payload_as(Checkpoint)) is not None:
            if all(c.id != event.id for c in state.checkpoints):
                state.checkpoints.append(
                    # One keyword a field, like the MemoryExtracted event below and signal_event's: different records.
                    CheckpointRef(
                        id=event.id,
                        seq=event.seq,
                        conversation_id=event.conversation_id,
                        span_id=event.span_id,
                        after_seq=cp.after_seq,
                        through_seq=cp.through_seq,
                    )
                )
                self.wake.set()
        elif (extracted := event.payload_as(MemoryExtracted)) is not None:
            # Done (by us, before a restart that lost the state file's last write).
            state.checkpoints = [c for c in state.checkpoints if c.id != extracted.checkpoint_id]

    async def run(self) -> None:
        await self.ctx.caught_up.wait()
        backoff = self.ctx.work_backoff()
        while True:
            self.wake.clear()
            if not self.ctx.state.checkpoints:
                await self.wake.wait()
                continue
            cp = self.ctx.state.checkpoints[0]
            hold = background_hold(self.ctx, "memory_extraction")
            if hold is not None:  # the checkpoint stays queued: extracted after the reset
                await wait_out(self.ctx, hold, self.wake, f"memory extraction of checkpoint {cp.id}")
                continue
            try:
                await self.extract(cp)
            except (ModelFailed, BusUnavailable, RemoteError) as exc:
                log.warning("memory extraction for checkpoint %s failed (%d), retrying: %s",
                            cp.id, backoff.failures + 1, exc)
                if not await backoff.sleep(self.ctx.stop):
                    return
                continue
            backoff.reset()
            self.ctx.state.checkpoints = [c for c in self.ctx.state.checkpoints if c.id != cp.id]
            await self.ctx.persist()

    async def extract(self, cp: CheckpointRef) -> None:
        event_id = memory_event_id(cp.id)
        if await exists(self.ctx.bus, event_id):
            log.info("checkpoint %s was already extracted", cp.id)
            return
        query = QueryRequest(
            after_seq=cp.after_seq, through_seq=cp.through_seq, conversation_id=cp.conversation_id, kinds=["message"]
        )
        turns = [event async for page in read_range(self.ctx.bus, query) for event in page]
        episode = Episode()
        # One model call per chunk (one per checkpoint unless its range is very long).
        for chunk in _chunks([turn_line(t) for t in turns], self.ctx.settings.memory_chunk_chars):
            answer = await self.ctx.model.complete(
                model=self.ctx.settings.memory_model_name, instructions=MEMORY_INSTRUCTIONS, text=chunk,
                meter=self.ctx.meter,
                cause=Cause("memory_extraction", "inner", cp.id, conversation_id=cp.conversation_id,
                            span_id=cp.span_id, parent_id=cp.id),
            )
            episode.add(answer)
        event = make_event(
            MemoryExtracted(
                checkpoint_id=cp.id,
                items=episode.items,
                summary=episode.summary,
                decisions=episode.decisions,
                open_loops=episode.open_loops,
                after_seq=cp.after_seq,
                through_seq=cp.through_seq,
                turn_ids=[t.id for t in turns],
            ),
            conversation_id=cp.conversation_id,
            span_id=cp.span_id,
            channel="inner",
            parent_id=cp.id,
            id=event_id,
        )
        await self.ctx.bus.publish(topics.ledger_append("inner-plane"), event)
        log.info("checkpoint %s: %d turns -> episode of %d chars, %d memory items",
                 cp.id, len(turns), len(episode.summary or ""), len(episode.items))


def _chunks(lines: list[str], limit: int) -> list[str]:
    """Transcript text in pieces of at most ``limit`` characters (a single longer turn is cut)."""
    chunks: list[str] = []
    current: list[str] = []
    size = 0
    for line in lines:
        line = line[:limit]
        if current and size + len(line) + 1 > limit:
            chunks.append("\n".join(current))
            current, size = [], 0
        current.append(line)
        size += len(line) + 1
    if current:
        chunks.append("\n".join(current))
    return chunks


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")
SUMMARY_MAX = 8000  # MemoryExtracted.summary's limit
LIST_MAX = 50  # decisions / open loops kept per checkpoint
ENTRY_MAX = 1000


class Episode:
    """What the checkpoint's answers (one per chunk) say: the summary, decisions, open loops, items."""

    def __init__(self) -> None:
        self.summaries: list[str] = []
        self.decisions: list[str] = []
        self.open_loops: list[str] = []
        self.items: list[dict[str, Any]] = []

    def add(self, answer: str) -> None:
        data = _json(answer)
        if isinstance(data, dict):
            if isinstance(data.get("summary"), str) and data["summary"].strip():
                self.summaries.append(data["summary"].strip())
            self.decisions += _strings(data.get("decisions"))
            self.open_loops += _strings(data.get("open_loops"))
        self.items.extend(parse_items(answer))

    @property
    def summary(self) -> str | None:
        text = "\n".join(self.summaries)
        return text[:SUMMARY_MAX] if text else None


def _json(answer: str) -> Any:
    try:
        return json.loads(_FENCE.sub("", answer.strip()).strip())
    except json.JSONDecodeError:
        return None


def _strings(value: Any) -> list[str]:
    if not isinstance(value, list):
        return []
    return [" ".join(str(v).split())[:ENTRY_MAX] for v in value if str(v).strip()][:LIST_MAX]


def parse_items(answer: str) -> list[dict[str, Any]]:
    """The model's items; a non-JSON answer becomes one free-text item instead of a failure."""
    text = _FENCE.sub("", answer.strip()).strip()
    if not text:
        return []
    try:
        data: Any = json.loads(text)
    except json.JSONDecodeError:
        return [{"kind": "note", "text": text}]
    if isinstance(data, dict):
        for key in ("items", "memories", "facts"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = [data]
    if not isinstance(data, list):
        return [{"kind": "note", "text": str(data)}]
    items: list[dict[str, Any]] = []
    for entry in data:
        if isinstance(entry, str) and entry.strip():
            items.append({"kind": "fact", "text": entry.strip()})
        elif isinstance(entry, dict) and entry:
            body = entry.get("text") or entry.get("fact") or entry.get("content")
            if not body:
                body = json.dumps(entry, ensure_ascii=False)
            items.append({**entry, "kind": str(entry.get("kind") or entry.get("type") or "fact"), "text": str(body)})
    return items
