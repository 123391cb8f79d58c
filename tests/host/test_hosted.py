"""The host's own promises, with services that are coroutines of the test: a service failing by
exception (or by the SystemExit that ended its own process) is started again with backoff and
touches no other; every line a service logs, from its tasks and threads too, carries its name;
SIGTERM's stop goes in the launcher's order (every service together, the ledger last); each
service starts as soon as ``serve_all`` is handed it; the host hands over the ledger as soon as
it is imported, and every other service once all of them are.

No process here: what runs is ``delegate.host``'s real code (``Hosted``, ``serve_all``); the
services in one real host process are tests/e2e/test_host_mode.py's.
"""

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from delegate.host.host import Refused, loaded, serve_all
from delegate.host.hosted import Hosted
from delegate.runtime.logs import ServiceName
from delegate.runtime.settings import ServiceSettings
from tests.support.waiting import eventually


async def test_a_failing_service_is_started_again_and_the_others_run_on_untouched() -> None:
    settings = ServiceSettings()
    starts: dict[str, int] = {"flaky": 0, "steady": 0}
    steady_stopped = asyncio.Event()

    async def flaky(_: ServiceSettings, stop: asyncio.Event) -> None:
        starts["flaky"] += 1
        if starts["flaky"] == 1:
            raise SystemExit(1)  # what a service does to be restarted when it has a process of its own
        if starts["flaky"] == 2:
            raise RuntimeError("boom")
        await stop.wait()

    async def steady(_: ServiceSettings, stop: asyncio.Event) -> None:
        starts["steady"] += 1
        await stop.wait()
        steady_stopped.set()

    stopping = asyncio.Event()
    hosted = [Hosted("flaky", settings, flaky), Hosted("steady", settings, steady)]
    host = asyncio.create_task(serve_all(hosted, stopping))
    await eventually(lambda: starts["flaky"] == 3, "the third start of the failing service")
    assert starts["steady"] == 1 and not steady_stopped.is_set() and not host.done()
    stopping.set()
    await asyncio.wait_for(host, 10)
    assert steady_stopped.is_set() and starts == {"flaky": 3, "steady": 1}


async def test_every_line_a_service_logs_carries_its_name() -> None:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(ServiceName("host"))
    handler.setFormatter(logging.Formatter("%(service)s %(message)s"))
    log = logging.getLogger("tests.host.names")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        def named(name: str):  # type: ignore[no-untyped-def]
            async def serve(_: ServiceSettings, stop: asyncio.Event) -> None:
                log.info("said by %s itself", name)

                async def child() -> None:
                    log.info("said by a task of %s", name)

                await asyncio.create_task(child())
                await asyncio.to_thread(log.info, "said by a thread of %s", name)
                await stop.wait()
            return serve

        stopping = asyncio.Event()
        settings = ServiceSettings()
        host = asyncio.create_task(serve_all([Hosted(n, settings, named(n)) for n in ("agent", "memory")], stopping))
        await eventually(lambda: out.getvalue().count("thread of") == 2, "both services' lines")
        log.info("said by the host")
        stopping.set()
        await asyncio.wait_for(host, 10)
    finally:
        log.removeHandler(handler)
    lines = out.getvalue().splitlines()
    for name in ("agent", "memory"):
        for said in (f"said by {name} itself", f"said by a task of {name}", f"said by a thread of {name}"):
            assert f"{name} {said}" in lines, (said, lines)
    assert "host said by the host" in lines


async def test_the_stop_takes_every_service_together_and_the_ledger_last() -> None:
    order: list[str] = []
    started: list[str] = []

    def service(name: str):  # type: ignore[no-untyped-def]
        async def serve(_: ServiceSettings, stop: asyncio.Event) -> None:
            started.append(name)
            await stop.wait()
            await asyncio.sleep(0.05)  # a stop takes a moment: the next stage waits for it
            order.append(name)
        return serve

    stopping = asyncio.Event()
    settings = ServiceSettings()
    names = ("ledger", "agent", "gateway", "memory")
    host = asyncio.create_task(serve_all([Hosted(n, settings, service(n)) for n in names], stopping))
    await eventually(lambda: len(started) == len(names), "every service to start")
    stopping.set()
    await asyncio.wait_for(host, 10)
    assert order[-1] == "ledger" and sorted(order[:3]) == ["agent", "gateway", "memory"]


async def test_each_service_runs_as_soon_as_it_is_loaded() -> None:
    """``serve_all`` starts a service as soon as it is handed it: here the second is handed
    over only once the first runs."""
    settings = ServiceSettings()
    started: list[str] = []
    stopped: list[str] = []

    def service(name: str):  # type: ignore[no-untyped-def]
        async def serve(_: ServiceSettings, stop: asyncio.Event) -> None:
            started.append(name)
            await stop.wait()
            stopped.append(name)
        return serve

    async def loading() -> AsyncIterator[Hosted]:
        yield Hosted("ledger", settings, service("ledger"))
        await eventually(lambda: "ledger" in started, "the first service to run")
        yield Hosted("agent", settings, service("agent"))

    stopping = asyncio.Event()
    host = asyncio.create_task(serve_all(loading(), stopping))
    await eventually(lambda: started == ["ledger", "agent"], "both services to run")
    stopping.set()
    await asyncio.wait_for(host, 10)
    assert stopped == ["agent", "ledger"]  # the ledger last, as ever


async def test_a_service_refusing_its_settings_stops_those_already_running() -> None:
    settings = ServiceSettings()
    stopped: list[str] = []

    async def steady(_: ServiceSettings, stop: asyncio.Event) -> None:
        await stop.wait()
        stopped.append("ledger")

    async def loading() -> AsyncIterator[Hosted]:
        yield Hosted("ledger", settings, steady)
        await asyncio.sleep(0)  # the ledger's task gets to run before the refusal
        raise Refused(os.EX_CONFIG)

    with pytest.raises(Refused) as refused:
        await asyncio.wait_for(serve_all(loading(), asyncio.Event()), 10)
    assert refused.value.code == os.EX_CONFIG and stopped == ["ledger"]


async def test_a_stop_while_loading_starts_no_more_services() -> None:
    settings = ServiceSettings()
    started: list[str] = []
    never = asyncio.Event()

    async def serve(_: ServiceSettings, stop: asyncio.Event) -> None:
        started.append("ledger")
        await stop.wait()

    async def loading() -> AsyncIterator[Hosted]:
        yield Hosted("ledger", settings, serve)
        await never.wait()  # the next service's import, still going on at the stop
        yield Hosted("agent", settings, serve)

    stopping = asyncio.Event()
    host = asyncio.create_task(serve_all(loading(), stopping))
    await eventually(lambda: started == ["ledger"], "the first service to start")
    stopping.set()
    await asyncio.wait_for(host, 10)
    assert started == ["ledger"]


async def test_every_service_but_the_ledger_is_imported_before_the_first_one_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A refusal by a later service's settings comes before any service but the ledger is
    handed over: no import runs on the host's worker thread while those run (a library one
    service imported lazily was seen half-initialized by another in a host). The ledger is
    handed over at once: its writer process's start is on every start's path."""
    monkeypatch.setenv("COMPACT_THRESHOLD", "5")  # below the API's minimum: the agent refuses
    into: list[Hosted] = []
    with pytest.raises(Refused):
        async for _ in loaded(["ledger", "inner-plane", "agent"], into):
            pass
    assert [h.name for h in into] == ["ledger"]


@pytest.mark.integration  # a fresh interpreter
def test_the_collector_is_off_while_the_host_imports_and_its_imports_are_frozen_after(tmp_path: Path) -> None:
    """``python -m delegate.host`` imports with the cyclic collector off (it scanned the
    imported modules' objects over and over: ~0.1-0.2 s of a start's CPU), and turns it on once
    every service is imported, with those objects frozen so that it never scans them again.
    In a fresh interpreter: a collector left off would let a running host's garbage cycles grow."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "DATABASE_"))}
    env.update(RUNTIME_DATA_DIR=str(tmp_path))
    probe = (
        "import asyncio, gc, json\n"
        "import delegate.host.__main__\n"
        "from delegate.host.host import collect_from_now_on, loaded\n"
        "seen = [('start', gc.isenabled(), gc.get_freeze_count())]\n"
        "async def main():\n"
        "    async for hosted in loaded(['ledger', 'memory'], [], imported=collect_from_now_on):\n"
        "        seen.append((hosted.name, gc.isenabled(), gc.get_freeze_count()))\n"
        "asyncio.run(main())\n"
        "print(json.dumps(seen))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    (_, on_at_start, _), (first, on_at_ledger, _), (second, on_at_memory, frozen) = json.loads(
        done.stdout.strip().splitlines()[-1]
    )
    assert (first, second) == ("ledger", "memory")
    assert not on_at_start and not on_at_ledger  # the ledger is handed over before the others are imported
    assert on_at_memory and frozen > 10_000, frozen
