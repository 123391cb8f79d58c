"""How long a big import holds up the gateway's event loop: ``GET /healthz`` while it runs.

    .venv/bin/python bench/import_stall.py [--mb 50] [--format ndjson|chatgpt|both]

Starts nats-server, the ledger and the gateway as real processes (as ``make run`` starts them),
then:

  floor     300 sequential ``GET /healthz`` on an idle gateway (the same client as below)
  import    one ``POST /api/import`` of ``--mb`` MB (NDJSON: short lines, ~130 bytes each, as in
            the probe that found the stall: 50 MB is ~385,000 lines; ChatGPT: an export of
            conversations of 20 messages) sent from a worker thread, while the main loop asks
            ``GET /healthz`` back to back; the probe runs from the POST until the gateway has
            written the last event (``GET /api/import/{id}``: ``events`` = ``total``)

Each ``/healthz`` answer waits for the gateway's event loop: its p99 during the import is how
long a chat socket or a call relay could wait for its turn. Target: p99 <= 100 ms (the probe
that found this measured a 4.56 s stall while a 50 MB body was parsed on the loop).
"""

import argparse
import asyncio
import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.stats import pct  # noqa: E402
from tests.support.system import System  # noqa: E402

TARGET_P99 = 0.100
START = datetime(2021, 3, 1, tzinfo=UTC)


def ndjson_body(megabytes: float) -> tuple[bytes, int]:
    lines: list[bytes] = []
    size, i = 0, 0
    while size < megabytes * 1_000_000:
        line = json.dumps({
            "ts": (START + timedelta(seconds=i)).isoformat(), "role": "user" if i % 2 == 0 else "assistant",
            "text": f"short line {i}", "conversation": f"c{i // 200}",
        }).encode()
        lines.append(line)
        size += len(line) + 1
        i += 1
    return b"\n".join(lines), len(lines)


def chatgpt_body(megabytes: float) -> tuple[bytes, int]:
    conversations: list[str] = []
    size, messages, c = 0, 0, 0
    t0 = START.timestamp()
    while size < megabytes * 1_000_000:
        mapping: dict[str, Any] = {"root": {"id": "root", "parent": None, "children": ["m0"], "message": None}}
        parent = "root"
        for m in range(20):
            node_id = f"m{m}"
            mapping[node_id] = {
                "id": node_id, "parent": parent, "children": [f"m{m + 1}"] if m < 19 else [],
                "message": {
                    "id": f"c{c}-{node_id}", "author": {"role": "user" if m % 2 == 0 else "assistant"},
                    "create_time": t0 + c * 100 + m,
                    "content": {"content_type": "text", "parts": [f"message {m} of conversation {c}, " * 4]},
                    "metadata": {"model_slug": "gpt-4o"},
                },
            }
            parent = node_id
        text = json.dumps({"id": f"conv-{c}", "title": f"chat {c}", "create_time": t0 + c * 100,
                           "current_node": "m19", "mapping": mapping})
        conversations.append(text)
        size += len(text) + 2
        messages += 20
        c += 1
    return ("[" + ",\n".join(conversations) + "]").encode(), messages


async def probe(http: httpx.AsyncClient, samples: list[float], stop: threading.Event | asyncio.Event,
                count: int | None = None) -> None:
    while not stop.is_set() and (count is None or len(samples) < count):
        started = time.perf_counter()
        reply = await http.get("/healthz")
        samples.append(time.perf_counter() - started)
        reply.raise_for_status()


def post_import(system: System, body: bytes, content_type: str, out: dict[str, Any]) -> None:
    with httpx.Client(base_url=system.http, headers=system.auth(), timeout=600) as client:
        started = time.perf_counter()
        reply = client.post("/api/import", content=body, headers={"Content-Type": content_type})
        out["answered_s"] = time.perf_counter() - started
        out["reply"] = reply


async def written(http: httpx.AsyncClient, import_id: str) -> None:
    while True:
        status = (await http.get(f"/api/import/{import_id}")).json()
        if status["status"] == "failed":
            raise RuntimeError(f"the import failed: {status}")
        if status["total"] and status["events"] >= status["total"]:
            return
        await asyncio.sleep(0.2)


async def one_import(system: System, fmt: str, megabytes: float) -> dict[str, Any]:
    body, lines = ndjson_body(megabytes) if fmt == "ndjson" else chatgpt_body(megabytes)
    content_type = "application/x-ndjson" if fmt == "ndjson" else "application/json"
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=60) as http:
        floor: list[float] = []
        await probe(http, floor, asyncio.Event(), count=300)
        during: list[float] = []
        out: dict[str, Any] = {}
        poster = threading.Thread(target=post_import, args=(system, body, content_type, out))
        stop = threading.Event()
        prober = asyncio.ensure_future(probe(http, during, stop))
        started = time.perf_counter()
        poster.start()
        while poster.is_alive():
            await asyncio.sleep(0.05)
        reply = out["reply"]
        if reply.status_code != 202:
            raise RuntimeError(f"the import was refused: {reply.status_code} {reply.text[:500]}")
        await written(http, reply.json()["import_id"])
        total_s = time.perf_counter() - started
        stop.set()
        await prober
    return {"format": fmt, "mb": len(body) / 1e6, "lines": lines, "floor": floor, "during": during,
            "answered_s": out["answered_s"], "total_s": total_s, "events": reply.json()["events"]}


def report(result: dict[str, Any]) -> None:
    floor, during = result["floor"], result["during"]
    p99 = pct(during, 99)
    print(f"\n{result['format']}: {result['mb']:.1f} MB, {result['lines']:,} messages, {result['events']:,} events")
    print(f"  POST answered after {result['answered_s']:.2f} s; every event written after {result['total_s']:.2f} s")
    print(f"  floor  /healthz idle:        p50 {pct(floor, 50) * 1000:7.2f} ms  p99 {pct(floor, 99) * 1000:7.2f} ms"
          f"  ({len(floor)} requests)")
    print(f"  during /healthz importing:   p50 {pct(during, 50) * 1000:7.2f} ms  p99 {p99 * 1000:7.2f} ms"
          f"  max {max(during) * 1000:7.2f} ms  ({len(during)} requests; p99 {p99 / pct(floor, 99):.1f}x the floor)")
    verdict = "met" if p99 <= TARGET_P99 else "MISSED"
    print(f"  target p99 <= {TARGET_P99 * 1000:.0f} ms: {verdict}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=50.0)
    parser.add_argument("--format", choices=("ndjson", "chatgpt", "both"), default="both")
    args = parser.parse_args()
    formats = ("ndjson", "chatgpt") if args.format == "both" else (args.format,)
    with tempfile.TemporaryDirectory(prefix="import-stall-") as tmp:
        system = System(Path(tmp), env={"IMPORT_MAX_BYTES": str(int(args.mb * 1.2e6) + 1_000_000)})
        try:
            system.start("ledger", "gateway", separate=True)
            for fmt in formats:
                report(asyncio.run(one_import(system, fmt, args.mb)))
        finally:
            system.stop()


if __name__ == "__main__":
    main()
