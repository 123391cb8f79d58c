"""Shared by the tool registry tests: settings that ignore the machine's env, ledger reading."""

import json
import sys
from pathlib import Path
from typing import Any

from delegate.agent.tools import ToolRegistry, ToolSettings
from delegate.contracts import topics
from delegate.contracts.events import Event, Fence
from delegate.contracts.messages import ToolCallReply, ToolCallRequest, ToolListRequest, ToolSpec
from delegate.runtime.bus import Bus

MCP_SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_server.py"

# Every channel off unless a test turns it on: the machine's environment must not leak in.
_OFF: dict[str, Any] = {
    "openai_api_key": None, "openai_base_url": None,
    "twilio_account_sid": None, "twilio_auth_token": None, "twilio_phone_number": None,
    "twilio_api_base_url": None, "owner_phone": None,
    "smtp_host": None, "smtp_port": None, "smtp_user": None, "smtp_password": None, "smtp_from": None,
    "owner_email": None, "github_token": None, "github_repos": "",
}


def tool_settings(**overrides: Any) -> ToolSettings:
    fast = {"mcp_probe_interval_s": 0.5, "tools_reload_interval_s": 0.2, "mcp_max_backoff_s": 1.0,
            "mcp_start_wait_s": 15.0}
    return ToolSettings(_env_file=None, **{**_OFF, **fast, **overrides})


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    tmp.replace(path)


def stdio_server() -> dict[str, Any]:
    return {"command": sys.executable, "args": [str(MCP_SERVER)]}


async def ledger_events(bus: Bus) -> list[Event]:
    """Every event on the LEDGER stream, in stream order."""
    info = await bus.js.stream_info("LEDGER")
    events = []
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await bus.js.get_msg("LEDGER", seq)
        assert msg.data is not None
        events.append(topics.LEDGER_APPEND_ANY.decode(msg.data))
    return events


async def bus_call(bus: Bus, name: str, arguments: dict[str, Any] | None = None, **fields: Any) -> ToolCallReply:
    req = ToolCallRequest(name=name, arguments=arguments or {}, **fields)
    return await bus.request(topics.TOOLS_CALL, req, timeout=60.0)


async def bus_list(bus: Bus, agent: str = "base") -> list[ToolSpec]:
    return (await bus.request(topics.TOOLS_LIST, ToolListRequest(agent=agent))).tools


async def bus_names(bus: Bus, agent: str = "base") -> set[str]:
    return {t.name for t in await bus_list(bus, agent)}


class Running:
    """A started registry serving on a real bus, plus a separate client connection."""

    def __init__(self, registry: ToolRegistry, server_bus: Bus, client: Bus) -> None:
        self.registry = registry
        self.server_bus = server_bus
        self.client = client

    async def aclose(self) -> None:
        await self.registry.aclose()
        await self.client.close()
        await self.server_bus.close()


async def run_registry(nats_url: str, runtime_dir: Path, *, fence: Fence | None = None, **settings: Any) -> Running:
    server_bus = await Bus.connect(nats_url, "agent-tools-test")
    await server_bus.ensure_streams(all_owners=True)  # stands in for the ledger
    registry = ToolRegistry(runtime_dir, server_bus, settings=tool_settings(**settings), fence=lambda: fence)
    await registry.start()
    await registry.serve(server_bus)
    client = await Bus.connect(nats_url, "tools-client-test")
    return Running(registry, server_bus, client)
