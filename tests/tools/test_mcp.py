"""Real MCP servers (tests/support/mcp_server.py) as separate processes, over stdio and streamable
HTTP, discovered and called through tools.cmd.call on a real bus."""

import asyncio
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from delegate.contracts import topics
from delegate.contracts.events import ToolResult
from delegate.contracts.messages import ToolListRequest
from delegate.launcher.procs import ManagedProcess, free_port, wait_for_port
from tests.support.waiting import eventually

from .helpers import MCP_SERVER, bus_call, bus_list, bus_names, ledger_events, run_registry, stdio_server
from .helpers import write_json as write


async def test_stdio_server_is_discovered_called_timed_out_and_restarted(nats_url: str, tmp_path: Path) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    write(rt / "mcp-servers.json", {"servers": {"kit": {**stdio_server(), "timeout_s": 2}}})
    write(rt / "agent-policies.json", {"agents": {
        "base": {"allow_tags": ["local", "mcp"], "deny_names": ["kit__fail"]},
        "voice": {"allow_tags": ["mcp:kit"], "deny_names": ["kit__exit_process"]},
    }})
    run = await run_registry(nats_url, rt)
    try:
        specs = {t.name: t for t in await bus_list(run.client)}
        assert {"kit__echo", "kit__add", "kit__pid", "kit__hang", "kit__exit_process"} <= set(specs)
        assert "kit__fail" not in specs  # denied by name: not even offered
        assert specs["kit__add"].tags == ["mcp", "mcp:kit"] and specs["kit__add"].timeout_s == 2
        assert specs["kit__add"].parameters["required"] == ["a", "b"]
        voice = await bus_names(run.client, "voice")
        assert "kit__echo" in voice and "kit__exit_process" not in voice and "notes_create" not in voice

        added = await bus_call(run.client, "kit__add", {"a": 2, "b": 40})
        assert added.ok and added.output == "42"
        wrong = await bus_call(run.client, "kit__add", {"a": "two"})
        assert wrong.error_code == "invalid_arguments"
        assert "'two' is not of type 'integer' (at a)" in wrong.output and "'b' is a required property" in wrong.output
        refused = await bus_call(run.client, "kit__fail", {}, call_id="refused-fail")
        assert refused.error_code == "denied"

        hung = await bus_call(run.client, "kit__hang", {}, call_id="hang-1")
        assert not hung.ok and hung.error_code == "timeout"
        assert "did not finish within 2 seconds" in hung.output
        assert (await bus_call(run.client, "kit__echo", {"text": "still here"})).output == "still here"

        # The server exits in the middle of a call: a clear error, then a new process serves.
        first_pid = int((await bus_call(run.client, "kit__pid")).output)
        died = await bus_call(run.client, "kit__exit_process", {}, call_id="exit-1")
        assert not died.ok and died.error_code == "unavailable"
        assert "went away during the call" in died.output and "'kit'" in died.output

        async def new_pid() -> int | None:
            reply = await bus_call(run.client, "kit__pid")
            return int(reply.output) if reply.ok and int(reply.output) != first_pid else None

        second_pid = await eventually(new_pid, what="kit reconnected with a new process")

        # Killed from outside while a call is in flight.
        marker = tmp_path / "kit-hang"
        hang = asyncio.create_task(
            bus_call(run.client, "kit__hang", {"seconds": 60, "marker": str(marker)}, call_id="hang-kill")
        )
        await eventually(_exists(marker), what="the hang call reached the server process")
        os.kill(second_pid, signal.SIGKILL)
        killed = await hang
        assert killed.error_code == "unavailable" and "went away during the call" in killed.output

        async def third_pid() -> int | None:
            reply = await bus_call(run.client, "kit__pid")
            return int(reply.output) if reply.ok and int(reply.output) not in (first_pid, second_pid) else None

        await eventually(third_pid, what="kit reconnected after the kill")
        assert run.registry.servers["kit"].connects >= 3

        results = {e.payload["call_id"]: e.typed(ToolResult) for e in await ledger_events(run.client)
                   if e.kind == "tool.result"}
        assert results["hang-1"].error_code == "timeout"
        assert results["exit-1"].error_code == "unavailable"
        assert results["hang-kill"].error_code == "unavailable"
        assert results["refused-fail"].error_code == "denied"
    finally:
        await run.aclose()
    assert (rt / "logs" / "mcp-kit.log").exists()


async def test_http_server_goes_away_and_comes_back(nats_url: str, tmp_path: Path) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    port = free_port()
    server = ManagedProcess("mcp-http", [sys.executable, str(MCP_SERVER), "--http", str(port)], dict(os.environ),
                            tmp_path / "mcp-http.log")
    server.start()
    assert server.proc is not None
    wait_for_port(port, 20, server.proc)
    write(rt / "mcp-servers.json", {"servers": {"web": {"url": f"http://127.0.0.1:{port}/mcp", "timeout_s": 30}}})
    run = await run_registry(nats_url, rt)
    try:
        assert {"web__echo", "web__hang", "web__fail"} <= await bus_names(run.client)
        assert (await bus_call(run.client, "web__echo", {"text": "over http"})).output == "over http"
        failed = await bus_call(run.client, "web__fail", {"reason": "no"})
        assert failed.error_code == "failed" and "Error executing tool fail" in failed.output

        marker = tmp_path / "web-hang"
        hang = asyncio.create_task(
            bus_call(run.client, "web__hang", {"seconds": 60, "marker": str(marker)}, call_id="http-hang")
        )
        await eventually(_exists(marker), what="the hang call reached the server process")
        server.kill()
        killed = await hang
        assert not killed.ok and killed.error_code == "unavailable" and "'web'" in killed.output

        async def gone() -> bool:
            return not any(n.startswith("web__") for n in await bus_names(run.client))

        await eventually(gone, what="web's tools left the list while it is down")
        down = await bus_call(run.client, "web__echo", {"text": "anyone?"})
        assert down.error_code == "unavailable" and "not connected right now" in down.output

        server.start()
        wait_for_port(port, 20, server.proc)

        async def back() -> bool:
            reply = await bus_call(run.client, "web__echo", {"text": "again"})
            return reply.ok and reply.output == "again"

        await eventually(back, timeout=30, what="web reconnected after its restart")
    finally:
        await run.aclose()
        server.stop()


async def test_mcp_config_reload_adds_and_removes_servers(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    run = await run_registry(nats_url, rt)
    try:
        assert not any("__" in n for n in await bus_names(run.client))
        write(rt / "mcp-servers.json", {"servers": {"late": stdio_server()}})

        async def added() -> bool:
            return "late__echo" in await bus_names(run.client)

        await eventually(added, what="a server added at run time")
        caplog.set_level(logging.ERROR)
        (rt / "mcp-servers.json").write_text('{"servers": {"late": \n')  # broken: keeps "late"

        async def complained() -> bool:
            return any("keeping the previous MCP servers" in r.getMessage() and "line 2" in r.getMessage()
                       for r in caplog.records)

        await eventually(complained, what="the bad reload was logged")
        assert "late__echo" in await bus_names(run.client)
        assert (await bus_call(run.client, "late__echo", {"text": "kept"})).output == "kept"
        write(rt / "mcp-servers.json", {"servers": {}})

        async def removed() -> bool:
            return "late__echo" not in await bus_names(run.client)

        await eventually(removed, what="the server removed at run time")
        assert "late" not in run.registry.servers
    finally:
        await run.aclose()


def _exists(path: Path) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return path.exists()

    return check


async def test_a_tool_openai_would_refuse_is_left_out_and_listed_as_refused(
    nats_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rt = tmp_path / "rt"
    rt.mkdir()
    server = stdio_server()
    write(rt / "mcp-servers.json", {"servers": {"kit": {**server, "args": [*server["args"], "--broken-tool"]}}})
    caplog.set_level(logging.WARNING, logger="delegate.agent.tools.registry")
    run = await run_registry(nats_url, rt)
    try:
        reply = await run.client.request(topics.TOOLS_LIST, ToolListRequest())
        names = {t.name for t in reply.tools}
        assert "kit__echo" in names and "kit__tag_notes" not in names  # the good tools stay
        [refused] = reply.refused
        assert (refused.name, refused.source, refused.tool) == ("kit__tag_notes", "mcp:kit", "tag_notes")
        assert refused.reason == "the array schema at properties.tags does not say what its items are"
        assert "kit__tag_notes" not in {t["name"] for t in run.registry.openai_tools()}
        called = await bus_call(run.client, "kit__tag_notes", {"tags": ["a"]})
        assert called.error_code == "unknown_tool"

        # A new server process lists the tools again (as every probe does): logged once all the same.
        server_kit = run.registry.servers["kit"]
        connects = server_kit.connects
        await bus_call(run.client, "kit__exit_process", {})

        async def reconnected() -> bool:
            return server_kit.connects > connects and bool(run.registry.refused())

        await eventually(reconnected, what="the server restarted and its tools listed again")
        assert [r.name for r in run.registry.refused()] == ["kit__tag_notes"]
        said = [r for r in caplog.records if "tag_notes" in r.getMessage()]
        assert len(said) == 1 and "is not offered" in said[0].getMessage()
    finally:
        await run.aclose()
