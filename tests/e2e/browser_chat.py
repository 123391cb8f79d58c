"""A ``/chat`` client that behaves as the browser page does when the server goes away and back.

It mirrors client/js/connection.js and the sending half of client/js/composer.js:

- every (re)connect sends ``hello`` with the highest committed seq it holds, and the replay
  that follows brings exactly what it has not seen;
- while away it probes ``GET /readyz`` (first after 250 ms, doubling up to 1 s) and opens a
  new socket as soon as the server says ready; a ``resync`` frame (or close 4408) goes
  straight back;
- a message goes over the socket when it is live, otherwise over ``POST /api/messages``; one
  that is not acknowledged within 4 s, and every unacknowledged one at ``ready``, is posted
  over HTTP with the same ``client_msg_id`` (the gateway stores it once);
- a message whose post failed is marked failed, and the owner presses Retry once the server
  is ready again (the page offers exactly that button).

Waits are on conditions: every frame and status change wakes the waiters.
"""

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import WebSocketException

from tests.support.system import System

T = TypeVar("T")

WS_CONFIRM_S = 4.0  # composer.js WS_CONFIRM_MS
READY_POLL_S = 0.25  # connection.js READY_POLL_MS
READY_POLL_CAP_S = 1.0  # connection.js READY_POLL_CAP_MS
CLOSE_UNAUTHORIZED = 4401


@dataclass
class Pending:
    client_msg_id: str
    text: str
    status: str = "sending"  # sending | sent | failed
    event_id: str | None = None
    posting: bool = False
    posts: int = 0  # how often it went over HTTP
    retries: int = 0  # how often the owner pressed Retry


class BrowserChat:
    def __init__(self, system: System) -> None:
        self.system = system
        self.url = f"{system.ws}/chat?token={system.token}"
        self.http = httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=10.0)
        self.status = "stopped"
        self.ws: ClientConnection | None = None
        self.last_seq = 0
        self.events: list[dict[str, Any]] = []  # committed events as they arrived, replay included
        self.seen_ids: set[str] = set()
        self.repeated: list[dict[str, Any]] = []  # an event delivered a second time (must stay empty)
        self.pending: dict[str, Pending] = {}
        self.delivered: dict[str, Pending] = {}  # what left ``pending`` when its message was committed
        self.user_event: dict[str, dict[str, Any]] = {}  # client_msg_id -> the stored user message
        self.answers: dict[str, list[dict[str, Any]]] = {}  # user message id -> its outcomes
        self.deltas: Counter[str] = Counter()  # turn id (the user message id) -> delta frames seen
        self.connects = 0
        self.errors: list[dict[str, Any]] = []
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped = False
        self._runner: asyncio.Task[None] | None = None

    # ---- connection (connection.js) ---------------------------------------------------------

    def start(self) -> None:
        self._stopped = False
        self._runner = asyncio.create_task(self._run())

    async def close(self) -> None:
        self._stopped = True
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        for task in [*self._tasks, *([self._runner] if self._runner else [])]:
            task.cancel()
        await asyncio.gather(*self._tasks, *([self._runner] if self._runner else []), return_exceptions=True)
        await self.http.aclose()

    def _set_status(self, status: str) -> None:
        self.status = status
        self.wake()

    def wake(self) -> None:
        """Wake every waiter to check its condition again."""
        self._changed.set()

    async def _run(self) -> None:
        while not self._stopped:
            self._set_status("connecting" if self.connects == 0 else "reconnecting")
            soon = False
            try:
                async with connect(self.url, max_size=2**22, open_timeout=5) as ws:
                    self.ws = ws
                    self.connects += 1
                    await ws.send(json.dumps({"type": "hello", "after_seq": self.last_seq}))
                    async for text in ws:
                        frame = json.loads(text)
                        if frame.get("type") == "resync":
                            soon = True
                            break
                        self._on_frame(frame)
                if ws.close_code == CLOSE_UNAUTHORIZED:
                    self._set_status("signed-out")
                    return
                soon = soon or ws.close_code == 4408
            except (OSError, WebSocketException, TimeoutError):
                pass
            finally:
                self.ws = None
            if self._stopped:
                return
            self._set_status("reconnecting")
            if not soon:
                await self._until_ready()

    async def _until_ready(self) -> None:
        """connection.js _pollReady: probe readiness, first soon, then less often."""
        polls = 0
        while not self._stopped:
            await asyncio.sleep(min(READY_POLL_CAP_S, READY_POLL_S * 2**polls))  # the page's probe schedule
            polls += 1
            with contextlib.suppress(httpx.HTTPError):
                if (await self.http.get("/readyz", timeout=2.0)).status_code == 200:
                    return

    # ---- frames (app.js onFrame) --------------------------------------------------------------

    def _on_frame(self, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "event":
            self._committed(frame["event"])
        elif kind == "delta":
            self.deltas[str(frame.get("turn_id"))] += 1
        elif kind == "ack" and frame.get("request") == "message":
            p = self.pending.get(frame.get("client_msg_id") or "")
            if p is not None:
                p.status, p.event_id = "sent", frame.get("event_id")
        elif kind == "error":
            self.errors.append(frame)
            p = self.pending.get(frame.get("client_msg_id") or "")
            if frame.get("request") == "message" and p is not None and p.status != "sent":
                p.status = "failed"
        elif kind == "ready":
            self._set_status("live")
            # app.js afterReady: whatever is unconfirmed may have died with the old socket.
            for p in list(self.pending.values()):
                if p.status != "sent":
                    self._spawn(self._post(p))
        self.wake()

    def _committed(self, event: dict[str, Any]) -> None:
        if event["id"] in self.seen_ids:
            self.repeated.append(event)
            return
        self.seen_ids.add(event["id"])
        self.events.append(event)
        self.last_seq = max(self.last_seq, int(event["seq"]))
        if event["kind"] == "message" and event["role"] == "user":
            cid = (event.get("payload") or {}).get("client_msg_id")
            if cid:
                self.user_event.setdefault(cid, event)
                p = self.pending.pop(cid, None)  # committed: no longer pending (addLive)
                if p is not None:
                    self.delivered[cid] = p
        answer = (event["kind"] == "message" and event["role"] == "assistant") or event["kind"] == "turn.failed"
        if answer and event.get("parent_id"):
            self.answers.setdefault(event["parent_id"], []).append(event)

    # ---- sending (composer.js send / postMessage) -------------------------------------------------

    async def say(self, text: str, client_msg_id: str) -> None:
        p = Pending(client_msg_id, text)
        self.pending[client_msg_id] = p
        self.wake()
        frame = {"type": "message", "text": text, "client_msg_id": client_msg_id}
        ws = self.ws
        if self.status == "live" and ws is not None:
            try:
                await ws.send(json.dumps(frame))
            except WebSocketException:
                self._spawn(self._post(p))
                return
            loop = asyncio.get_running_loop()
            loop.call_later(WS_CONFIRM_S, lambda: p.status == "sending" and self._spawn(self._post(p)))
        else:
            self._spawn(self._post(p))

    async def _post(self, p: Pending) -> None:
        if p.posting or p.client_msg_id not in self.pending:
            return
        p.posting = True
        p.posts += 1
        p.status = "sending"
        try:
            res = await self.http.post("/api/messages", json={"text": p.text, "client_msg_id": p.client_msg_id})
            res.raise_for_status()
            p.status, p.event_id = "sent", res.json().get("event_id")
        except httpx.HTTPError:
            p.status = "failed"
        finally:
            p.posting = False
            self.wake()

    async def _retry_when_ready(self, p: Pending) -> None:
        """The owner presses Retry on a failed message once the page says the server is back."""
        p.retries += 1
        await self._until_ready()
        await self._post(p)

    def _spawn(self, coro: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ---- waiting --------------------------------------------------------------------------------

    def turn_id(self, client_msg_id: str) -> str | None:
        """The id of the stored user message (= the turn id of its answer), once known."""
        user = self.user_event.get(client_msg_id)
        if user is not None:
            return str(user["id"])
        p = self.pending.get(client_msg_id)
        return p.event_id if p is not None else None

    def streaming(self, client_msg_id: str) -> bool:
        turn = self.turn_id(client_msg_id)
        return turn is not None and self.deltas[turn] > 0

    def answer_to(self, client_msg_id: str) -> dict[str, Any] | None:
        user = self.user_event.get(client_msg_id)
        if user is None:
            return None
        found = self.answers.get(user["id"])
        return found[0] if found else None

    async def answered(self, client_msg_id: str, timeout: float) -> dict[str, Any]:
        """Wait for the answer, pressing Retry on the message if its sending failed."""
        retrying: asyncio.Task[Any] | None = None

        def check() -> dict[str, Any] | None:
            nonlocal retrying
            p = self.pending.get(client_msg_id)
            if p is not None and p.status == "failed" and (retrying is None or retrying.done()):
                retrying = self._spawn(self._retry_when_ready(p))
            return self.answer_to(client_msg_id)

        return await self.wait_for(check, f"the answer to {client_msg_id}", timeout)

    async def wait_for(self, check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        # Not tests.support.waiting.eventually: this one wakes on every frame the page gets
        # (self._changed) instead of polling, so an answer is seen the moment it lands.
        deadline = time.monotonic() + timeout
        while True:
            self._changed.clear()
            value = check()
            if value:
                return value
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}; status {self.status}, "
                    f"pending {list(self.pending.values())[-3:]}, last events {self.events[-3:]}"
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(left, 1.0))
