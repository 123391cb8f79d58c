"""A ``/chat`` WebSocket client for end-to-end tests: what a browser tab sees, frame by frame."""

import asyncio
import contextlib
import json
from collections.abc import Callable
from typing import Any, TypeVar

import httpx
from websockets.asyncio.client import ClientConnection, connect

from tests.support.system import System
from tests.support.waiting import eventually

T = TypeVar("T")


class ChatClient:
    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.frames: list[dict[str, Any]] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, system: System, after_seq: int = 0) -> "ChatClient":
        ws = await connect(f"{system.ws}/chat?token={system.token}", max_size=2**22)
        client = cls(ws)
        await ws.send(json.dumps({"type": "hello", "after_seq": after_seq}))
        await client.wait_for(lambda: client.of_type("ready"), "the replay to finish")
        return client

    async def _read(self) -> None:
        with contextlib.suppress(Exception):
            async for text in self.ws:
                self.frames.append(json.loads(text))

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def send(self, text: str, client_msg_id: str | None = None) -> str:
        """Send a message; returns its event id (= the turn id of its answer)."""
        frame: dict[str, Any] = {"type": "message", "text": text}
        if client_msg_id:
            frame["client_msg_id"] = client_msg_id
        before = len(self.frames)
        await self.ws.send(json.dumps(frame))
        ack = await self.wait_for(
            lambda: next(
                (f for f in self.frames[before:] if f["type"] in ("ack", "error") and f.get("request") == "message"),
                None,
            ),
            "the message ack",
        )
        assert ack["type"] == "ack", ack
        return str(ack["event_id"])

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == kind]

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [f["event"] for f in self.of_type("event") if kind is None or f["event"]["kind"] == kind]

    def outcome(self, turn_id: str) -> dict[str, Any] | None:
        for event in self.events():
            if event["parent_id"] == turn_id and (
                (event["kind"] == "message" and event["role"] == "assistant") or event["kind"] == "turn.failed"
            ):
                return event
        return None

    async def answer(self, turn_id: str, timeout: float = 40.0) -> dict[str, Any]:
        return await self.wait_for(lambda: self.outcome(turn_id), f"the answer to {turn_id}", timeout)

    def deltas(self, turn_id: str) -> list[dict[str, Any]]:
        return [f for f in self.of_type("delta") if f["turn_id"] == turn_id]

    def streamed_text(self, turn_id: str) -> str:
        """What a browser shows: the newest attempt's deltas in order (older attempts dropped)."""
        deltas = self.deltas(turn_id)
        if not deltas:
            return ""
        last = max(d.get("attempt", 1) for d in deltas)
        return "".join(d["text"] for d in sorted((d for d in deltas if d.get("attempt", 1) == last),
                                                  key=lambda d: d["index"]))

    async def wait_for(self, check: Callable[[], T | None], what: str, timeout: float = 30.0) -> T:
        """``eventually``, with the last frames the page got in the failure."""
        return await eventually(check, what, timeout, explain=lambda: f"last frames: {self.frames[-5:]}")


def api(system: System) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=30.0)


async def timeline(system: System) -> list[dict[str, Any]]:
    """Every event of the whole history, walking /api/timeline pages back to the start."""
    events: list[dict[str, Any]] = []
    async with api(system) as http:
        params: dict[str, Any] = {"limit": 200}
        while True:
            page = (await http.get("/api/timeline", params=params)).raise_for_status().json()
            events = page["events"] + events
            if page["cursor"] is None:
                return events
            params["before"] = page["cursor"]
