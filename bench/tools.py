"""Tool registry call overhead: tools.cmd.call over NATS vs a direct in-process registry.call.

    .venv/bin/python bench/tools.py [--n 2000]

Starts a private nats-server, runs a registry with a trivial ``bench_echo`` tool, and times:
  direct, no ledger   registry.call with no bus (pure registry path: lookup, policy, schema, handler)
  direct + ledger     registry.call that also publishes tool.call/tool.result to JetStream
  bus + ledger        a Bus request on tools.cmd.call answered by the same registry (what voice uses)
Client and registry share one process and event loop here, so "bus" includes both ends' work.
"""

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from delegate.agent.tools import Tool, ToolRegistry, ToolSettings  # noqa: E402
from delegate.agent.tools.base import object_schema  # noqa: E402
from delegate.contracts import topics  # noqa: E402
from delegate.contracts.messages import ToolCallRequest  # noqa: E402
from delegate.launcher.procs import NatsServer  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402


async def echo(args: dict[str, Any]) -> str:
    return str(args["text"])


def settings() -> ToolSettings:
    off: dict[str, Any] = {k: None for k in ("openai_api_key", "openai_base_url", "twilio_account_sid",
                                              "smtp_host", "github_token")}
    return ToolSettings(_env_file=None, **off)


async def make(runtime: Path, bus: Bus | None) -> ToolRegistry:
    registry = ToolRegistry(runtime, bus, settings=settings())
    await registry.start()
    registry.register(Tool("bench_echo", "Echo.", object_schema({"text": {"type": "string"}}, ["text"]), echo))
    return registry


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def timed(n: int, one: Any) -> list[float]:
    for _ in range(min(200, n)):  # warm-up
        await one()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await one()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def main(n: int) -> None:
    logging.basicConfig(level=logging.ERROR)
    req = ToolCallRequest(name="bench_echo", arguments={"text": "hi"}, conversation_id="c", span_id="s")
    rows: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        nats = NatsServer(Path(tmp) / "nats").start()  # fsync on every JetStream write, as in production
        try:
            client = await Bus.connect(nats.url, "bench-client")
            for ledger in (False, True):
                server_bus = await Bus.connect(nats.url, "bench-agent")
                await server_bus.ensure_streams(all_owners=True)
                registry = await make(Path(tmp) / "rt", server_bus if ledger else None)
                await registry.serve(server_bus)
                suffix = " + ledger" if ledger else ", no ledger"

                async def direct(r: ToolRegistry = registry) -> None:
                    assert (await r.call(req)).ok

                async def over_bus() -> None:
                    assert (await client.request(topics.TOOLS_CALL, req)).ok

                rows["direct" + suffix] = await timed(n, direct)
                rows["bus" + suffix] = await timed(n, over_bus)
                await registry.aclose()
                await server_bus.close()
            await client.close()
        finally:
            nats.stop()
    print(f"tool registry call latency, n={n} per row (ms); client and registry in one process")
    print(f"{'path':<20}{'p50':>9}{'p99':>9}{'mean':>9}")
    for name, samples in rows.items():
        print(f"{name:<20}{pct(samples, 50):>9.3f}{pct(samples, 99):>9.3f}{statistics.fmean(samples):>9.3f}")
    p50 = {name: pct(s, 50) for name, s in rows.items()}
    for suffix in (", no ledger", " + ledger"):
        ratio = p50["bus" + suffix] / p50["direct" + suffix]
        print(f"bus vs direct{suffix}: p50 ratio {ratio:.2f}x, "
              f"overhead {p50['bus' + suffix] - p50['direct' + suffix]:.3f} ms")
    print(f"ledger recording (two JetStream publishes, fsync'd) p50 cost: "
          f"{p50['direct + ledger'] - p50['direct, no ledger']:.3f} ms")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    asyncio.run(main(parser.parse_args().n))
