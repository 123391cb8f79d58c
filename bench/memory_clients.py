"""The two ways bench/memory.py reaches the memory: the owner's REST API (the real path), and,
with ``--via-bus``, the bus directly (messages appended to the ledger as an import would
write them, search on ``memory.cmd.search``) for measuring the ranking before the REST routes exist.
"""

import asyncio
import json
import time
from datetime import datetime
from typing import Any, Protocol

import httpx

from bench.memory_data import ndjson
from delegate.contracts import topics
from delegate.contracts.events import Imported, Message, make_event
from delegate.contracts.memory import ImportStatusRequest, MemorySearchRequest
from delegate.runtime.bus import Bus, RemoteError

# (seconds to status done, seconds to every line indexed, the last status)
ImportTimes = tuple[float, float, dict[str, Any]]


class MemoryClient(Protocol):
    label: str
    floor_label: str

    async def import_lines(self, lines: list[dict[str, str]], timeout: float) -> ImportTimes: ...

    async def search(self, q: str, limit: int) -> list[dict[str, Any]]: ...

    async def floor(self) -> None: ...


class HttpClient:
    label = "GET /api/memory/search"
    floor_label = "GET /healthz, same client"

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def import_lines(self, lines: list[dict[str, str]], timeout: float) -> ImportTimes:
        t0 = time.perf_counter()
        reply = await self.http.post("/api/import", content=ndjson(lines),
                                     headers={"Content-Type": "application/x-ndjson"})
        if reply.status_code != 202:
            raise RuntimeError(f"POST /api/import: {reply.status_code} {reply.text[:500]}")
        import_id = reply.json()["import_id"]
        deadline = t0 + timeout
        done_at = 0.0
        while True:
            status = (await self.http.get(f"/api/import/{import_id}")).json()
            now = time.perf_counter()
            if status.get("status") == "failed":
                raise RuntimeError(f"import {import_id} failed: {json.dumps(status)[:1000]}")
            if status.get("status") == "done":
                done_at = done_at or now
                # "events" may count the conversation/span events an import writes besides the messages
                if status.get("indexed", 0) >= len(lines) or status.get("indexed") == status.get("events"):
                    return done_at - t0, now - t0, status
            if now > deadline:
                raise TimeoutError(f"import {import_id} not indexed after {timeout}s: {status}")
            await asyncio.sleep(0.05)

    async def search(self, q: str, limit: int) -> list[dict[str, Any]]:
        reply = await self.http.get("/api/memory/search", params={"q": q, "limit": limit})
        reply.raise_for_status()
        results: list[dict[str, Any]] = reply.json()["results"]
        return results

    async def floor(self) -> None:
        (await self.http.get("/healthz")).raise_for_status()


class BusClient:
    label = "memory.cmd.search over the bus"
    floor_label = "memory service ping, same connection"

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.count = 0

    async def import_lines(self, lines: list[dict[str, str]], timeout: float) -> ImportTimes:
        self.count += 1
        import_id = f"bench-{self.count}"
        events = []
        for n, line in enumerate(lines, 1):
            imported = Imported(import_id=import_id, line=n, ref=line.get("ref"), speaker=line.get("speaker"),
                                conversation=line.get("conversation"))
            conversation = f"{import_id}-{line.get('conversation', '')}"[:64]
            events.append(make_event(Message(text=line["text"], imported=imported), conversation_id=conversation,
                                     span_id=None, channel="text", role=line["role"],  # type: ignore[arg-type]
                                     ts=datetime.fromisoformat(line["ts"])))
        t0 = time.perf_counter()
        for start in range(0, len(events), 500):
            await asyncio.gather(*(self.bus.publish(topics.ledger_append("test"), e, msg_id=e.id)
                                   for e in events[start:start + 500]))
        done = time.perf_counter() - t0
        deadline = t0 + timeout
        while True:
            try:
                status = (await self.bus.request(topics.MEMORY_IMPORT, ImportStatusRequest(import_id=import_id))
                          ).model_dump(mode="json")
            except RemoteError as exc:  # not_found until its first message is indexed
                if exc.code != "not_found":
                    raise
                status = {"indexed": 0}
            if status.get("indexed", 0) >= len(lines):
                return done, time.perf_counter() - t0, status
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{import_id} not indexed after {timeout}s: {status}")
            await asyncio.sleep(0.05)

    async def search(self, q: str, limit: int) -> list[dict[str, Any]]:
        reply = await self.bus.request(topics.MEMORY_SEARCH, MemorySearchRequest(query=q, limit=limit))
        return [r.model_dump(mode="json") for r in reply.results]

    async def floor(self) -> None:
        await self.bus.ping("memory", timeout=5)


async def timed(call: Any) -> float:
    t0 = time.perf_counter()
    await call
    return time.perf_counter() - t0
