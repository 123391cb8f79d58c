"""A small real MCP server for tests, built with the official SDK's ``MCPServer``.

Run it as its own process, over stdio (the default) or streamable HTTP:

    python tests/support/mcp_server.py                 # stdio
    python tests/support/mcp_server.py --http PORT     # http://127.0.0.1:PORT/mcp

Tools: ``echo``, ``add``, ``pid`` (which process answers: tests use it to kill and to see a
restart), ``hang`` (never answers in time), ``exit_process`` (the server dies mid-call),
``fail`` (a tool error reported by the server). ``echo``, ``add`` and ``pid`` declare
``readOnlyHint: true``; the others declare nothing, so a client must assume they change things.
``--broken-tool`` adds ``tag_notes``, whose input schema OpenAI would refuse.
"""

import argparse
import asyncio
import os
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

server = MCPServer("test-tools")
READ_ONLY = ToolAnnotations(read_only_hint=True)


@server.tool(description="Echo the given text back.", annotations=READ_ONLY)
def echo(text: str) -> str:
    return text


@server.tool(description="Add two integers.", annotations=READ_ONLY)
def add(a: int, b: int) -> int:
    return a + b


@server.tool(description="The process id of this MCP server.", annotations=READ_ONLY)
def pid() -> int:
    return os.getpid()


@server.tool(description="Sleep for the given number of seconds, then answer (tests: longer than any timeout).")
async def hang(seconds: float = 3600.0, marker: str | None = None) -> str:
    if marker:  # tells a test the call has reached this process
        Path(marker).write_text(str(os.getpid()))
    await asyncio.sleep(seconds)
    return f"woke after {seconds}s"


@server.tool(description="Exit the server process at once, mid-call.")
def exit_process() -> str:
    os._exit(3)


@server.tool(description="Always fails with a tool error.")
def fail(reason: str = "it failed on purpose") -> str:
    raise ValueError(reason)


def add_broken_tool() -> None:
    """``tag_notes``, whose array parameter says nothing of its items: a schema OpenAI refuses
    ("array schema missing items"), as some real servers publish."""

    @server.tool(description="Tag notes with the given tags.", annotations=READ_ONLY)
    def tag_notes(tags: list) -> str:  # type: ignore[type-arg]
        return ", ".join(map(str, tags))

    tool = server._tool_manager.get_tool("tag_notes")
    assert tool is not None
    tool.parameters["properties"]["tags"].pop("items")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on this port")
    parser.add_argument("--broken-tool", action="store_true", help="also offer tag_notes, with a broken schema")
    args = parser.parse_args()
    if args.broken_tool:
        add_broken_tool()
    if args.http:
        server.run("streamable-http", host="127.0.0.1", port=args.http, streamable_http_path="/mcp")
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
