"""The tool registry: local tools, MCP servers and per-agent policies, served on the bus.

The agent runs it in-process and serves it on ``tools.cmd.list`` / ``tools.cmd.call`` so voice
and the durable-task runner call the very same tools::

    registry = ToolRegistry(settings.runtime_data_dir, bus)
    await registry.start()          # ConfigError names the bad file and line
    await registry.serve(bus)
    tools = registry.openai_tools("base")
    reply = await registry.call(ToolCallRequest(name=..., arguments=..., conversation_id=..., ...))
    await registry.aclose()
"""

from .base import SIDE_EFFECT, STARTS_TASK, ConfigError, Tool, ToolError, object_schema
from .registry import ToolRegistry
from .settings import ToolSettings

__all__ = [
    "SIDE_EFFECT", "STARTS_TASK", "ConfigError", "Tool", "ToolError", "ToolRegistry", "ToolSettings", "object_schema",
]
