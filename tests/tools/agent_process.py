"""The real agent process serving its tool registry, for tests that ask it over the bus as voice and
the tasks service do."""

from delegate.contracts.messages import ToolSpec
from delegate.runtime.bus import Bus, BusUnavailable
from tests.support.waiting import eventually

from .helpers import bus_list

# The model is never asked in these tests; a base URL still registers web_search.
OFFLINE_MODEL = {"OPENAI_API_KEY": "unused", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}


async def offered(bus: Bus, agent: str, *names: str) -> dict[str, ToolSpec]:
    """``agent``'s tools by name, once ``names`` are among them: the leader answers its ping a
    moment before it serves tools.cmd.*, and an MCP server may connect later still."""

    async def check() -> dict[str, ToolSpec] | None:
        try:
            specs = {s.name: s for s in await bus_list(bus, agent)}
        except BusUnavailable:
            return None
        return specs if set(names) <= set(specs) else None

    return await eventually(check, timeout=30, what=f"the {agent!r} agent is offered {names}")
