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
from delegate.runtime.bus import BusUnavailable, RemoteError

from .deps import BusDep, require_owner
from .errors import ApiError

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

OWNER_POLICY = "base"  # the policy of the owner's own conversation (agent-policies.json)


@router.get("/tools")
async def list_tools(bus: BusDep) -> dict[str, Any]:
    """``{"tools": [{name, description, tags}], "refused": [{name, source, tool, reason}]}``."""
    try:
        reply: ToolListReply = await bus.request(topics.TOOLS_LIST, ToolListRequest(agent=OWNER_POLICY))
    except BusUnavailable as exc:
        raise ApiError(503, "agent_unavailable", "the agent (tool registry) is not answering") from exc
    except RemoteError as exc:
        raise ApiError(502, exc.code, exc.message) from exc
    return {
        "tools": [tool.model_dump(mode="json", include={"name", "description", "tags"}) for tool in reply.tools],
        "refused": [refused.model_dump(mode="json") for refused in reply.refused],
    }
