"""A call's ledger events, written as they happen and in the order they were spoken.

One writer task publishes one event at a time, each acked before the next, so the stream holds
them in the order they were queued, and each event's ``ts`` is kept above the previous one, so
the timeline shows them in that order too. None of it is urgent, and the answer's audio shares
the event loop in a host: records are made and published once the call's audio has been quiet
for a moment (``after_audio``, ``AUDIO_QUIET_S``), and at once when the call ends.

Transcripts finish out of order: the caller's words are transcribed asynchronously and may
complete after the answer to them started. So messages follow the conversation's item order:
items are registered as the conversation adds them, and a message is written once every item
before it is written (or known to have no words). A SIGKILL then loses at most the sentence
still being said (and what the last few milliseconds' wait for the audio held). Nothing is
written for a call no stream ever claimed (its greeting was never heard).

On a call Delegate placed, the callee may be a machine until Twilio's verdict says otherwise:
their words are held (``callee`` "held": the first of them and everything after it waits), then
written as the owner's ("owner") or never written ("machine": a voicemail greeting is not what
the owner said, and memory extracts from user messages).
"""

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from delegate.contracts.events import Channel, Event, Fence, Message, Payload, make_event
from delegate.contracts.ids import utcnow
from delegate.runtime.bus import BusUnavailable

from .ledger import VoiceLedger

log = logging.getLogger(__name__)

TICK = timedelta(microseconds=1)
# A caller turn whose transcript never arrives stops holding back later messages after this.
TRANSCRIPT_WAIT_S = 15.0
# An answer's last audio delta comes with its done events, whose bookkeeping queues most of a
# call's writes, and a publish costs ~0.25 ms of CPU (encode, send, ack). In a host the gateway
# relays that delta on the same event loop, so a write waits until the call's audio has been quiet
# this long: the caller's frame leaves first (bench/voice.py --compare-modes, relay out).
AUDIO_QUIET_S = 0.005
# ... and no longer than this: an answer that streams on and on does not hold the record back.
AUDIO_HOLD_MAX_S = 0.5

Speaker = Literal["user", "assistant"]
Callee = Literal["owner", "held", "machine"]


@dataclass
class _Item:
    item_id: str
    role: Speaker
    added_at: float
    text: str | None = None
    done: bool = False
    meta: dict[str, Any] = field(default_factory=dict)


class Recorder:
    def __init__(
        self, ledger: VoiceLedger, fence: Callable[[], Fence], *, session_id: str, channel: Channel,
        audio_quiet_s: float = AUDIO_QUIET_S, audio_hold_max_s: float = AUDIO_HOLD_MAX_S,
    ) -> None:
        self.ledger = ledger
        self.fence = fence
        self.session_id = session_id
        self.channel: Channel = channel
        self.conversation_id: str | None = None
        self.span_id: str | None = None
        self.heard = False  # a stream claimed the call: what the model says is heard from now on
        self.callee: Callee = "owner"  # whose words the caller's side are (see the module's doc)
        self._items: dict[str, _Item] = {}  # in conversation order
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._last_ts: datetime | None = None
        self._writer: asyncio.Task[None] | None = None
        self._audio_at = -math.inf  # time.monotonic() of the newest audio handed to the caller
        self.audio_quiet_s, self.audio_hold_max_s = audio_quiet_s, audio_hold_max_s
        self._held: list[Callable[[], object]] = []  # records to make once the audio has gone
        self._holding: asyncio.Task[None] | None = None
        self._ending = asyncio.Event()  # the call is over: nothing waits for its audio any more

    def start(self, conversation_id: str, span_id: str) -> None:
        self.conversation_id, self.span_id = conversation_id, span_id
        self._writer = asyncio.create_task(self._write_all(), name=f"voice-recorder-{self.session_id}")

    def audio_out(self) -> None:
        """Audio was just handed to the caller: writes wait until it has gone (``audio_quiet_s``)."""
        self._audio_at = time.monotonic()

    def after_audio(self, record: Callable[[], object]) -> None:
        """Run ``record`` (its calls to ``said`` and ``write``) once the audio has gone, as writes
        wait: an answer's records are made as its last frame is on the way, and making them costs
        a few hundred µs of the same event loop. The end of the call runs what is still held."""
        self._held.append(record)
        if self._holding is None or self._holding.done():
            self._holding = asyncio.create_task(self._hold(), name=f"voice-records-{self.session_id}")

    async def _hold(self) -> None:
        await self._after_audio()
        self._run_held()

    def _run_held(self) -> None:
        held, self._held = self._held, []
        for record in held:
            try:
                record()
            except Exception:
                log.exception("call %s: a record failed", self.session_id)

    # ---- any event ------------------------------------------------------------------------

    def write(
        self, payload: Payload, *, role: Speaker | None = None, in_span: bool = True, id: str | None = None
    ) -> Event:
        """Queue one event of this call (in its span; ``in_span`` False: in the conversation only).
        ``id``: a deterministic id, for an event another process may write again or look up."""
        now = utcnow()
        if self._last_ts is not None and now <= self._last_ts:
            now = self._last_ts + TICK
        self._last_ts = now
        event = make_event(
            payload,
            conversation_id=self.conversation_id,
            span_id=self.span_id if in_span else None,
            channel=self.channel,
            role=role,
            ts=now,
            id=id,
        )
        self._queue.put_nowait(event)
        return event

    async def _write_all(self) -> None:
        while True:
            event = await self._queue.get()
            if event is None:
                return
            await self._after_audio()
            try:
                await self.ledger.append(event, self.fence())
            except BusUnavailable as exc:
                log.error("call %s: %s %s not recorded: %s", self.session_id, event.kind, event.id, exc)

    async def _after_audio(self) -> None:
        until = time.monotonic() + self.audio_hold_max_s
        while not self._ending.is_set() and (
            wait := min(self._audio_at + self.audio_quiet_s, until) - time.monotonic()
        ) > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await self._ending.wait()

    async def close(self, timeout: float) -> None:
        """Write what is queued (within ``timeout`` seconds), then stop the writer."""
        self._ending.set()
        if self._holding is not None:
            self._holding.cancel()
        self._run_held()
        if self._writer is None:
            return
        self._queue.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(self._writer), timeout)
        except TimeoutError:
            log.warning("call %s: %d events still unwritten at the end", self.session_id, self._queue.qsize())
            self._writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._writer

    # ---- transcripts in spoken order ------------------------------------------------------

    def add_item(self, item_id: str, role: Speaker) -> None:
        if item_id not in self._items:
            self._items[item_id] = _Item(item_id, role, asyncio.get_running_loop().time())

    def has_item(self, item_id: str) -> bool:
        return item_id in self._items

    def said(self, item_id: str, role: Speaker, text: str | None, **meta: Any) -> None:
        """The item's final words (None or empty: it had none); written when its turn comes."""
        self.add_item(item_id, role)
        item = self._items[item_id]
        if item.done:
            return
        item.text, item.done = text, True
        item.meta.update(meta)
        self.flush()

    def callee_is(self, callee: Callee) -> None:
        """Whose the caller side's words are from now on; what was held is written or dropped."""
        self.callee = callee
        self.flush()

    def flush(self, *, final: bool = False) -> None:
        """Write the leading finished items; ``final``: every item, with what it has (words still
        held at the end were never known to be the owner's: they are dropped)."""
        if final:
            self._run_held()
        if not self.heard and not final:
            return
        now = asyncio.get_running_loop().time()
        while self._items:
            item = next(iter(self._items.values()))
            if item.role == "user" and self.callee == "held" and not final:
                return
            stale = item.role == "user" and now - item.added_at > TRANSCRIPT_WAIT_S
            if not (item.done or final or stale):
                return
            del self._items[item.item_id]
            text = (item.text or "").strip()
            if not text or not self.heard:
                continue
            if item.role == "user" and self.callee != "owner":
                log.info("call %s: the callee's words (%s) not recorded: %s", self.session_id, item.item_id,
                         "a machine answered" if self.callee == "machine" else "no verdict on who answered")
                continue
            meta = {"session_id": self.session_id, "item_id": item.item_id, **item.meta}
            self.write(Message(text=text, meta=meta), role=item.role)
