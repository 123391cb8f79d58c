"""Durable tasks: restart-to-next-step, the journal's cost per step, SSE fan-out; floors in the same run.

    .venv/bin/python bench/tasks.py [--restarts 5] [--steps 30] [--events 2000] [--watchers 20]

Starts nats-server, the ledger, the agent (tool registry), the tasks service and the gateway as
real processes, the OpenAI stand-in answering instantly, and a local test site; then measures:

  restart -> step   the tasks service stopped (SIGTERM, then SIGKILL) in the middle of a task and
                    started again: from the stop to the next step journaled by the new runner.
                    SIGKILL leaves the dead runner's lease to expire (TASKS_LEASE_TTL, 3 s).
                    Floor: the same process started with nothing to resume, to its first ping.
  journal / tool    per step, the journal's two events (a side effect's intent and its result,
                    each published and acknowledged by JetStream) against the step's own tool
                    time: browser_open of a page of the local site, in the same process, same run.
  SSE fan-out       --events task events published into one task's span while --watchers
                    clients follow GET /api/tasks/{id}/events: events/s to every watcher, from the
                    first publish until every watcher has every event. Floor: one watcher.

Prints figures; asserts nothing. On a shared 2-core machine trust the ratios more than the rates.
"""

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from delegate.contracts import topics  # noqa: E402
from delegate.contracts.events import Event, TaskEvent, make_event  # noqa: E402
from delegate.contracts.messages import QueryRequest  # noqa: E402
from delegate.contracts.tasks import TaskControl, TaskCreate, TaskGet  # noqa: E402
from delegate.runtime.bus import MSG_ID, Bus  # noqa: E402
from delegate.tasks.browser import Browser  # noqa: E402
from delegate.tasks.egress import HostPolicy  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402
from tests.tasks.helpers import answer, tool_call  # noqa: E402
from tests.tasks.site import TestSite  # noqa: E402


def line(label: str, value: str) -> None:
    print(f"  {label:<56} {value}")


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def span_events(bus: Bus, span_id: str, kind: str) -> list[Event]:
    reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(span_id=span_id, kinds=[kind], limit=5000))
    return reply.events


async def wait_for(check: Any, timeout: float = 120.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise TimeoutError("bench: a condition did not hold in time")


async def restarts(system: System, bus: Bus, standin: StandinProcess, site: TestSite, count: int) -> None:
    # A long task on a slow page: each restart lands while a step is in flight.
    standin.script(tool_call("browser_open", {"url": site.url("/slow?s=0.5")}, times=4 * count + 10),
                   answer("done"))
    reply = await bus.request(topics.TASKS_CREATE, TaskCreate(goal="bench: keep browsing"))
    assert reply.task is not None
    task_id = reply.task.id
    results: dict[str, list[float]] = {"SIGTERM": [], "SIGKILL": []}
    for how in ("SIGTERM", "SIGKILL"):
        for _ in range(count):
            seen = len(await span_events(bus, task_id, "task.step"))
            await wait_for(lambda seen=seen: _more(bus, task_id, seen))
            proc = system.procs["tasks"]
            stopped = time.perf_counter()
            if how == "SIGKILL":
                proc.kill()
            else:
                proc.stop()  # SIGTERM, then waits for the exit
            steps_then = len(await span_events(bus, task_id, "task.step"))
            proc.start()
            await wait_for(lambda n=steps_then: _more(bus, task_id, n), timeout=60)
            results[how].append(time.perf_counter() - stopped)
    await bus.request(topics.TASKS_CONTROL, TaskControl(id=task_id, action="cancel"))
    standin.reset()

    # Floor: the process itself, with nothing to resume, to its first ready ping.
    floors = []
    for _ in range(3):
        system.procs["tasks"].stop()
        started = time.perf_counter()
        system.procs["tasks"].start()
        system.wait_ready(["tasks"], timeout=60)
        floors.append(time.perf_counter() - started)
    floor = statistics.median(floors)
    print("restart -> next step journaled (target <= 5 s):")
    line("floor: the tasks process started to ready, idle (median)", f"{floor:.2f} s")
    for how, samples in results.items():
        median = statistics.median(samples)
        line(f"after {how} (median / worst of {len(samples)})",
             f"{median:.2f} s / {max(samples):.2f} s = {median / floor:.1f}x floor")


async def _more(bus: Bus, task_id: str, seen: int) -> bool:
    return len(await span_events(bus, task_id, "task.step")) > seen


async def journal_cost(system: System, bus: Bus, site: TestSite, steps: int) -> None:
    """The journal's two events per step against the step's tool time, both measured here."""
    workdir = Path(tempfile.mkdtemp(prefix="bench-tasks-"))
    browser = Browser(HostPolicy.parse(f"127.0.0.1:{site.port}", allow_public=False))
    await browser.start()
    tool_ms: list[float] = []
    journal_ms: list[float] = []
    task_id = "bench-journal"
    try:
        async with browser.for_task(task_id, workdir) as tab:
            await tab.call("browser_open", {"url": site.url("/a")})  # the browser's first launch
            for step in range(steps):
                started = time.perf_counter()
                result = await tab.call("browser_open", {"url": site.url("/a") if step % 2 else site.url("/")})
                tool_ms.append((time.perf_counter() - started) * 1000)
                assert result.ok, result.output
                started = time.perf_counter()
                for kind in ("task.step.intent", "task.step"):
                    event = make_event(TaskEvent(task_id=task_id, data={"step": step, "output": result.output}),
                                       kind=kind, conversation_id=None, span_id=task_id, channel="inner")
                    await bus.publish(topics.ledger_append("test"), event, msg_id=event.id)
                journal_ms.append((time.perf_counter() - started) * 1000)
    finally:
        await browser.close()
    tool, journal = statistics.median(tool_ms), statistics.median(journal_ms)
    print(f"journal per step, {steps} steps (browser_open of a local page):")
    line("tool time (p50 / p99)", f"{tool:.1f} ms / {pct(tool_ms, 0.99):.1f} ms")
    line("journal: intent + result, each acknowledged (p50 / p99)",
         f"{journal:.2f} ms / {pct(journal_ms, 0.99):.2f} ms")
    line("journal / tool time", f"{journal / tool:.3f} ({100 * journal / tool:.1f}% per step)")


async def fanout(system: System, bus: Bus, standin: StandinProcess, events: int, watchers: int) -> None:
    standin.script(answer("fan-out target"))
    reply = await bus.request(topics.TASKS_CREATE, TaskCreate(goal="bench: a span to watch"))
    assert reply.task is not None
    task_id = reply.task.id
    await wait_for(lambda: span_events(bus, task_id, "span.closed"))
    rates = {}
    for count in (1, watchers):
        rates[count] = await _fan(system, bus, task_id, events, count)
    print(f"SSE fan-out of {events} task events:")
    line("floor: one watcher", f"{rates[1]:,.0f} events/s")
    line(f"{watchers} watchers, every event to every one", f"{rates[watchers]:,.0f} events/s to each "
         f"= {rates[watchers] / rates[1]:.2f}x floor ({rates[watchers] * watchers:,.0f} deliveries/s)")


async def _state(bus: Bus, task_id: str, state: str) -> bool:
    reply = await bus.request(topics.TASKS_GET, TaskGet(id=task_id))
    return reply.task is not None and reply.task.state == state


async def _fan(system: System, bus: Bus, task_id: str, events: int, count: int) -> float:
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=120) as http:
        last = max(e.seq or 0 for e in await span_events(bus, task_id, "span.closed"))
        ready = [asyncio.Event() for _ in range(count)]

        async def watch(i: int) -> int:
            got = 0
            async with http.stream("GET", f"/api/tasks/{task_id}/events", headers={"Last-Event-ID": str(last)}) as r:
                ready[i].set()
                async for text in r.aiter_lines():
                    if text.startswith("event: task"):
                        got += 1
                        if got == events:
                            return got
            return got

        tasks = [asyncio.create_task(watch(i)) for i in range(count)]
        await asyncio.gather(*(r.wait() for r in ready))
        started = time.perf_counter()
        for n in range(events):
            event = make_event(TaskEvent(task_id=task_id, data={"n": n}), kind="task.step", conversation_id=None,
                               span_id=task_id, channel="inner")
            await bus.js.publish_async(topics.ledger_append("test").subject, topics.LEDGER_APPEND_ANY.encode(event),
                                       headers={MSG_ID: event.id})
        await bus.js.publish_async_completed()
        got = await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - started
        assert all(g == events for g in got), got
        return events / elapsed


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="bench-tasks-"))
    with TestSite() as site, StandinProcess(log_dir=root / "standin") as standin:
        env = {"OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": standin.base_url, "LOG_LEVEL": "WARNING",
               "TASKS_ALLOWED_HOSTS": f"127.0.0.1:{site.port}", "TASKS_THOUGHTFLOW": "false"}
        system = System(root, env=env)
        try:
            system.start("ledger", "agent", "tasks", "gateway", separate=True)
            assert system.nats is not None
            bus = await Bus.connect(system.nats.url, "bench")
            try:
                await restarts(system, bus, standin, site, args.restarts)
                await journal_cost(system, bus, site, args.steps)
                await fanout(system, bus, standin, args.events, args.watchers)
            finally:
                await bus.close()
        finally:
            system.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--watchers", type=int, default=20)
    asyncio.run(main(parser.parse_args()))
