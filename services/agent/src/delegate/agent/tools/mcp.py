"""One supervised connection per configured MCP server (stdio or streamable HTTP).

The connection lives in its own task, because the SDK's transport is an anyio task group: when
the server dies that group cancels the task that entered it, so no caller may be that task.
Callers run ``call`` from their own tasks; a call in flight when the server dies gets the SDK's
"Connection closed" error, turned here into a clear tool error. The supervisor then drops the
server's tools from the registry and reconnects with capped exponential backoff.
"""

import asyncio
import hashlib
import json
import logging
import re
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CONNECTION_CLOSED, CallToolResult, ImageContent, TextContent
from mcp_types import Tool as McpTool

from delegate.runtime.retry import Backoff

from .base import FAILED, SIDE_EFFECT, UNAVAILABLE, Tool, ToolError
from .config import McpServerConfig

log = logging.getLogger(__name__)

TOOL_NAME = re.compile(r"[^A-Za-z0-9_-]")
MAX_NAME = 64  # OpenAI function names: ^[a-zA-Z0-9_-]{1,64}$
FIRST_BACKOFF_S = 0.5
STABLE_AFTER_S = 10.0  # a connection that lived this long resets the backoff


def exposed_name(server: str, tool: str) -> str:
    """``<server>__<tool>``, made a valid OpenAI function name (a hash keeps long names unique)."""
    name = TOOL_NAME.sub("_", f"{server}__{tool}")
    if len(name) > MAX_NAME:
        digest = hashlib.sha1(name.encode()).hexdigest()[:8]
        name = f"{name[: MAX_NAME - 9]}_{digest}"
    return name


def _schema(tool: McpTool) -> dict[str, Any]:
    schema = dict(tool.input_schema or {})
    schema.setdefault("type", "object")
    schema.setdefault("properties", {})
    return schema


def tool_tags(server: str, tool: McpTool) -> tuple[str, ...]:
    """``mcp``, ``mcp:<server>``, and ``side_effect`` unless the server says the tool only reads.

    The MCP default for ``readOnlyHint`` is false, and we cannot see what a server's tool does:
    only an explicit ``readOnlyHint: true`` leaves it untagged. The hint is the word of a
    server the owner configured, which is the trust every other call to it rests on too.
    """
    read_only = tool.annotations is not None and tool.annotations.read_only_hint is True
    return ("mcp", f"mcp:{server}") if read_only else ("mcp", f"mcp:{server}", SIDE_EFFECT)


def result_text(result: CallToolResult) -> str:
    parts: list[str] = []
    for block in result.content:
        if isinstance(block, TextContent):
            parts.append(block.text)
        elif isinstance(block, ImageContent):
            parts.append(f"[image {block.mime_type}, {len(block.data) * 3 // 4} bytes, not shown]")
        else:
            parts.append(f"[{getattr(block, 'type', 'content')} block]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return "\n".join(parts) if parts else "(no output)"


class McpServer:
    """Keeps one MCP server connected and its tools registered while it is."""

    def __init__(
        self,
        name: str,
        config: McpServerConfig,
        *,
        register: Callable[[str, list[Tool]], None],
        unregister: Callable[[str], None],
        probe_interval_s: float,
        max_backoff_s: float,
        log_dir: Path,
    ) -> None:
        self.name = name
        self.config = config
        self._register = register
        self._unregister = unregister
        self._probe_interval_s = probe_interval_s
        self._max_backoff_s = max_backoff_s
        self._log_dir = log_dir
        self._client: Client | None = None
        self._lost = asyncio.Event()  # set by a call that saw the connection close
        self._task: asyncio.Task[None] | None = None
        self.connected = asyncio.Event()
        self.connects = 0  # successful connections so far (tests and logs)

    @property
    def source(self) -> str:
        return f"mcp:{self.name}"

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"mcp-{self.name}")

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        self._drop()

    # ---- the supervisor -------------------------------------------------------------------

    async def _supervise(self) -> None:
        # No stop event: aclose() cancels this task, which also ends a backoff sleep.
        backoff = Backoff(initial=FIRST_BACKOFF_S, maximum=self._max_backoff_s)
        while True:
            started = time.monotonic()
            try:
                await self._connection()
                log.warning("MCP server %r: connection ended", self.name)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("MCP server %r: %s", self.name, _describe(exc))
            finally:
                self._drop()
            if time.monotonic() - started >= STABLE_AFTER_S:
                backoff.reset()
            delay = backoff.next_delay()
            log.info("MCP server %r: reconnecting in %.1fs", self.name, delay)
            await asyncio.sleep(delay)

    async def _connection(self) -> None:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(Client(self._transport(stack), cache=None))
            tools = await self._list(client)
            self._client = client
            self._lost.clear()
            self._register(self.name, tools)
            self.connects += 1
            self.connected.set()
            log.info("MCP server %r connected: %d tools", self.name, len(tools))
            known = {t.meta["mcp_name"] for t in tools}
            while True:
                try:
                    await asyncio.wait_for(self._lost.wait(), self._probe_interval_s)
                    return  # a call saw the connection close
                except TimeoutError:
                    pass
                # The probe doubles as liveness check (a dead stdio server or an HTTP server
                # that went away fails it) and as refresh when the server's tool list changes.
                tools = await asyncio.wait_for(self._list(client), max(self._probe_interval_s, 5.0))
                names = {t.meta["mcp_name"] for t in tools}
                if names != known:
                    log.info("MCP server %r: tool list changed (%d tools)", self.name, len(tools))
                    self._register(self.name, tools)
                    known = names

    def _transport(self, stack: AsyncExitStack) -> Any:
        cfg = self.config
        if cfg.url:
            http = httpx2.AsyncClient(headers=cfg.expanded_headers(), timeout=httpx2.Timeout(30.0, read=300.0))
            stack.push_async_callback(http.aclose)
            return streamable_http_client(cfg.url, http_client=http)
        params = StdioServerParameters(
            command=cfg.command or "", args=cfg.args, env=cfg.expanded_env() or None, cwd=cfg.cwd
        )
        return stdio_client(params, errlog=self._errlog(stack))

    def _errlog(self, stack: AsyncExitStack) -> TextIO:
        # The server's stderr goes to a log file of its own, never into our pipes.
        self._log_dir.mkdir(parents=True, exist_ok=True)
        f = open(self._log_dir / f"mcp-{self.name}.log", "a", encoding="utf-8")  # noqa: SIM115 - closed by stack
        stack.callback(f.close)
        return f

    async def _list(self, client: Client) -> list[Tool]:
        tools: list[Tool] = []
        cursor: str | None = None
        for _ in range(100):  # a server whose pages never end cannot hang us
            page = await client.list_tools(cursor=cursor)
            tools.extend(self._tool(t) for t in page.tools)
            cursor = page.next_cursor
            if cursor is None:
                break
        return tools

    def _tool(self, tool: McpTool) -> Tool:
        mcp_name = tool.name

        async def handler(arguments: dict[str, Any]) -> str:
            return await self.call(mcp_name, arguments)

        description = tool.description or tool.title or f"{mcp_name} (MCP server {self.name})"
        return Tool(
            name=exposed_name(self.name, mcp_name),
            description=description,
            parameters=_schema(tool),
            handler=handler,
            tags=tool_tags(self.name, tool),
            timeout_s=self.config.timeout_s,
            source=self.source,
            meta={"mcp_name": mcp_name, "server": self.name},
        )

    def _drop(self) -> None:
        self._client = None
        self.connected.clear()
        self._unregister(self.name)

    # ---- calls ----------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> str:
        client = self._client
        if client is None:
            raise ToolError(UNAVAILABLE, f"MCP server {self.name!r} is not connected right now; it is being restarted.")
        try:
            result = await client.call_tool(tool, arguments)
        except MCPError as exc:
            # -32000 alone is also a server's generic error code; the SDK's own closure says so.
            closed = exc.code == CONNECTION_CLOSED and "connection closed" in exc.message.lower()
            if self._client is not client or closed:
                self._lost.set()
                raise ToolError(
                    UNAVAILABLE,
                    f"MCP server {self.name!r} went away during the call to {tool!r} ({exc.message}); "
                    "it did not answer, so the call may or may not have taken effect. It is being reconnected.",
                ) from exc
            raise ToolError(FAILED, f"MCP server {self.name!r} rejected the call to {tool!r}: {exc.message}") from exc
        except (httpx2.HTTPError, OSError) as exc:
            self._lost.set()
            raise ToolError(UNAVAILABLE, f"MCP server {self.name!r} cannot be reached: {exc!r}") from exc
        text = result_text(result)
        if result.is_error:
            raise ToolError(FAILED, text)
        return text


def _describe(exc: BaseException) -> str:
    """One line for a failure that may be an ExceptionGroup from the SDK's task groups."""
    if isinstance(exc, BaseExceptionGroup):
        leaves: list[BaseException] = []

        def walk(e: BaseException) -> None:
            if isinstance(e, BaseExceptionGroup):
                for sub in e.exceptions:
                    walk(sub)
            else:
                leaves.append(e)

        walk(exc)
        return "; ".join(_describe(e) for e in leaves[:3])
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"
