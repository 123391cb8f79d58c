"""``GET /api/tools``: what the owner's assistant may use, and what it was offered and refused.

The agent owns the tool registry (local tools and MCP servers, filtered by policy); the gateway
asks it on ``tools.cmd.list``. A server's tool that OpenAI would refuse (a bad schema, a name
outside the function-name rule) is never offered to the model, since one such tool fails every
request it is in; it is listed here with its reason so the owner can see why it is missing.
"""

from typing import Any

from fastapi import APIRouter, Depends

from delegate.contracts import topics
from delegate.contracts.messages import ToolListReply, ToolListRequest

from .ask import ask
from .deps import BusDep, require_owner

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

SILENT = ("agent_unavailable", "the agent (tool registry) is not answering")
STATUS: dict[str, int] = {}  # every refusal is the service failing: 502

OWNER_POLICY = "base"  # the policy of the owner's own conversation (agent-policies.json)


@router.get("/tools")
async def list_tools(bus: BusDep) -> dict[str, Any]:
    """``{"tools": [{name, description, tags}], "refused": [{name, source, tool, reason}]}``."""
    listing = ToolListRequest(agent=OWNER_POLICY)
    reply: ToolListReply = await ask(bus, topics.TOOLS_LIST, listing, silent=SILENT, status=STATUS)
    return {
        "tools": [tool.model_dump(mode="json", include={"name", "description", "tags"}) for tool in reply.tools],
        "refused": [refused.model_dump(mode="json") for refused in reply.refused],
    }
