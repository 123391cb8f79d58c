"""The /chat fan-out: one bus subscription per gateway process, one bounded outbox per connection.

The hub turns ``ledger.live.committed`` into a gapless, duplicate-free stream by
commit seq with the runtime's ``LedgerFollower``, as the inner plane and memory follow
the ledger: an event whose seq jumps ahead (a live message was lost, say while NATS
restarted) is preceded by the missing events, read from the ledger, and a quiet spell
asks the ledger for losses that no later event reveals. What is the hub's: it starts
at the ledger's newest event (clients replay the past with ``hello``), and a gap the
ledger leaves unfilled for GAP_GIVE_UP_S is given up, every client told to resync.

Every connection (``ChatClient``) has its own outbox. The hub never waits for a
client: it appends and moves on. A client whose outbox overflows is told
``resync`` and closed (4408); it reconnects with ``hello`` from its last seq, so
committed events are never silently dropped. Deltas are the one droppable frame.

A connection starts *pending*: committed events are held until it says ``hello``
(then the ledger replay runs and the held events follow it, deduplicated by seq)
or until a short grace period passes (then it simply goes live).
"""

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Literal

from delegate.contracts import topics, ws
from delegate.contracts.events import Event
from delegate.contracts.messages import AgentState, Delta, LiveNotice
from delegate.contracts.voice import VoiceState
from delegate.runtime.bus import Bus
from delegate.runtime.ledger_follower import LedgerFollower

from .voice_state import VoiceStateCache, voice_json

log = logging.getLogger(__name__)

Mode = Literal["pending", "replay", "live"]

REPLAY_PAGE = 500
GAP_GIVE_UP_S = 10.0  # a gap the ledger leaves unfilled this long is given up: every client resyncs
# Committed events received but not yet forwarded; when full, the subscription waits (a burst
# the hub cannot keep up with then shows up as a gap, which the ledger fills).
LIVE_QUEUE_MAX = 5000
CLOSE_LAGGING = 4408
RESYNC_LAGGING = json.dumps({"type": "resync", "reason": "lagging"})


def event_frame(event: Event) -> str:
    return '{"type":"event","event":' + event.model_dump_json() + "}"


def state_frame(state: AgentState, voice: dict[str, Any] | None = None) -> str:
    return json.dumps({"type": "state", **state.model_dump(mode="json", exclude={"error"}), "voice": voice})


def delta_frame(delta: Delta) -> str:
    return json.dumps({"type": "delta", **delta.model_dump(mode="json")})


def live_frame(notice: LiveNotice) -> str:
    return json.dumps({"type": "live", "event": notice.model_dump(mode="json")})


def frame(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields})


class ChatClient:
    """One /chat connection as the hub sees it: a bounded outbox and its place in the seq stream."""

    def __init__(self, limit: int, label: str) -> None:
        self.label = label
        self.limit = limit
        self.mode: Mode = "pending"
        self.last_seq: int | None = None  # highest event seq queued on this connection
        self.first_live_seq: int | None = None  # the first event seq it was sent
        self.close_code: int | None = None
        self.close_reason = ""
        self.closing_event = asyncio.Event()
        self._frames: deque[str] = deque()
        self._held: list[tuple[int, str]] = []  # committed events waiting for hello/replay to finish
        self._wake = asyncio.Event()
        self._space = asyncio.Event()
        self._space.set()

    @property
    def closing(self) -> bool:
        return self.close_code is not None

    # ---- producers (the hub, and the connection's own tasks) -----------------------------

    def send(self, text: str, *, droppable: bool = False) -> None:
        """Queue a non-event frame; a droppable one (a delta) is skipped instead of overflowing."""
        if self.closing:
            return
        if len(self._frames) >= self.limit:
            if droppable:
                return
            self._overflow()
            return
        self._push(text)

    def offer_event(self, seq: int, text: str) -> None:
        """A committed event from the hub: held while pending or replaying, else queued once."""
        if self.closing:
            return
        if self.mode != "live":
            if len(self._held) >= self.limit:
                self._overflow()
                return
            self._held.append((seq, text))
            return
        self._queue_event(seq, text)

    def _queue_event(self, seq: int, text: str) -> None:
        if self.last_seq is not None and seq <= self.last_seq:
            return  # already sent on this connection (replay and live overlap)
        if len(self._frames) >= self.limit:
            self._overflow()
            return
        self._push(text)
        self.last_seq = seq
        if self.first_live_seq is None:
            self.first_live_seq = seq

    def _push(self, text: str) -> None:
        self._frames.append(text)
        self._wake.set()
        if len(self._frames) >= self.limit // 2:
            self._space.clear()

    def _overflow(self) -> None:
        log.info("chat client %s fell behind (%d frames queued): resync", self.label, len(self._frames))
        self._frames.clear()
        self._held.clear()
        self._push(RESYNC_LAGGING)
        self.close(CLOSE_LAGGING, "lagging")

    def close(self, code: int, reason: str = "") -> None:
        """End the connection once the frames already queued are written."""
        if self.closing:
            return
        self.close_code = code
        self.close_reason = reason
        self.closing_event.set()
        self._wake.set()
        self._space.set()

    # ---- modes ------------------------------------------------------------------------------

    def go_live(self) -> None:
        """No hello came: deliver from the first held event on."""
        if self.mode == "pending":
            self.mode = "live"
            self._flush_held()

    def hello_too_late(self, after_seq: int) -> bool:
        """Events already went out live; replaying older ones now would break seq order."""
        return self.first_live_seq is not None and after_seq < self.first_live_seq - 1

    def begin_replay(self, after_seq: int) -> None:
        self.mode = "replay"
        self.last_seq = after_seq if self.last_seq is None else max(after_seq, self.last_seq)

    async def replay(self, events: list[Event]) -> bool:
        """Queue replayed events, waiting for room: a slow client only slows its own replay."""
        for event in events:
            await self._space.wait()
            if self.closing:
                return False
            assert event.seq is not None
            self._queue_event(event.seq, event_frame(event))
        return not self.closing

    def finish_replay(self, *, force: bool = False) -> bool:
        """Go live if the held events continue where the replay stopped (or ``force``)."""
        self._held.sort(key=lambda item: item[0])
        if not force and self._held and self.last_seq is not None and self._held[0][0] > self.last_seq + 1:
            return False  # the ledger had more than its answer said: query again
        self.mode = "live"
        self._flush_held()
        return True

    def _flush_held(self) -> None:
        held, self._held = self._held, []
        for seq, text in sorted(held, key=lambda item: item[0]):
            self._queue_event(seq, text)

    # ---- the writer ----------------------------------------------------------------------------

    async def next_frame(self) -> str | None:
        """The next frame to write; None once closing and everything queued is out."""
        while not self._frames:
            if self.closing:
                return None
            self._wake.clear()
            await self._wake.wait()
        text = self._frames.popleft()
        if len(self._frames) < self.limit // 2:
            self._space.set()
        return text


class Hub:
    """One set of live subscriptions per gateway process, shared by every /chat connection."""

    def __init__(self, *, queue_limit: int, tail_check_s: float) -> None:
        self.queue_limit = queue_limit
        self.tail_check_s = tail_check_s
        self.clients: set[ChatClient] = set()
        self.last_seq: int | None = None  # highest committed seq forwarded (gapless up to here)
        self.latest_state: AgentState | None = None
        self.voice = VoiceStateCache()
        self.follower: CommittedEvents | None = None
        self._stop = asyncio.Event()
        self._count = 0
        # Called with each committed event as it is forwarded (task event streams wake on these).
        self.watchers: set[Callable[[Event], None]] = set()

    @property
    def filled(self) -> int:
        """Committed events read from the ledger rather than from live notifications."""
        return 0 if self.follower is None else self.follower.read

    def attach(self) -> ChatClient:
        self._count += 1
        client = ChatClient(self.queue_limit, f"#{self._count}")
        self.clients.add(client)
        return client

    def detach(self, client: ChatClient) -> None:
        self.clients.discard(client)

    async def start(self, bus: Bus) -> None:
        self.follower = CommittedEvents(self, bus, self._stop)
        await self.follower.start()
        await bus.subscribe(topics.AGENT_DELTA, self._on_delta)
        await bus.subscribe(topics.AGENT_STATE, self._on_state)
        await bus.subscribe(topics.INNER_NOTICE, self._on_notice)
        await self.voice.start(bus, self._on_voice)
        bus.spawn(self.follower.run())

    def close_all(self, code: int, reason: str) -> None:
        for client in list(self.clients):
            client.close(code, reason)

    def stop(self) -> None:
        """The follower ends at its next step (not only when the bus cancels it)."""
        self._stop.set()

    # ---- committed events: gapless, in seq order (``CommittedEvents``) --------------------------

    def deliver(self, event: Event) -> None:
        assert event.seq is not None
        text = event_frame(event)
        for client in list(self.clients):
            client.offer_event(event.seq, text)
        self.last_seq = event.seq
        for watcher in list(self.watchers):
            try:
                watcher(event)
            except Exception:
                # The follower's loop must outlive one stream's bug; every other client still waits on it.
                log.exception("a watcher of committed events failed on seq %s", event.seq)

    def gap_lost(self) -> None:
        # The ledger did not answer for a long while: no client may believe it is complete, so
        # every one is told to resync (its hello replays from the ledger once it is back).
        log.error("giving up on the gap after seq %s: telling every client to resync", self.last_seq)
        for client in list(self.clients):
            client.send(frame("resync", reason="gap"))
            client.close(CLOSE_LAGGING, "gap")

    # ---- live-only frames ---------------------------------------------------------------------

    async def _on_delta(self, delta: Delta) -> None:
        text = delta_frame(delta)
        for client in list(self.clients):
            client.send(text, droppable=True)

    async def _on_state(self, state: AgentState) -> None:
        self.latest_state = state
        text = state_frame(state, self.voice.current)
        for client in list(self.clients):
            client.send(text)

    async def _on_voice(self, state: VoiceState) -> None:
        # Every open tab sees a call start and end, whichever tab (or phone) it is on.
        text = json.dumps(ws.voice_frame(voice_json(state)))
        for client in list(self.clients):
            client.send(text)

    async def _on_notice(self, notice: LiveNotice) -> None:
        text = live_frame(notice)
        for client in list(self.clients):
            client.send(text)


class CommittedEvents(LedgerFollower):
    """The hub's follower of committed events: each one forwarded to every client, in seq order."""

    def __init__(self, hub: Hub, bus: Bus, stop: asyncio.Event) -> None:
        super().__init__(
            bus,
            stop,
            source=None,
            queue_max=LIVE_QUEUE_MAX,
            resync_s=hub.tail_check_s,
            page=REPLAY_PAGE,
            from_head=True,
            gap_give_up_s=GAP_GIVE_UP_S,
        )
        self.hub = hub

    @property
    def last_seq(self) -> int:
        # Placed at the ledger's newest seq by the first catch-up, before anything is applied.
        return self.hub.last_seq or 0

    def start_at(self, seq: int) -> None:
        self.hub.last_seq = seq

    def letter_id(self, event: Event) -> str:
        return event.id  # never used: forwarding to outboxes cannot fail, so nothing is parked

    async def on_gap_lost(self) -> None:
        self.hub.gap_lost()

    async def apply_run(self, events: Sequence[Event]) -> None:
        for event in events:
            self.hub.deliver(event)
            # A burst of committed events arrives back to back without the loop ever switching
            # tasks; yielding here lets every connection's writer keep pace instead of overflowing.
            await asyncio.sleep(0)
