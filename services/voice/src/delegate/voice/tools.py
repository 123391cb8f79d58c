"""The agent's tool registry, as a voice call uses it (agent name ``voice``).

The registry lives in the agent process and applies the ``voice`` policy of
agent-policies.json; it also records each call and its result (``tool.call`` / ``tool.result``)
in the ledger, with the ids of the voice call's conversation and span passed here.
"""

import json
import logging
from typing import Any

from delegate.contracts import topics
from delegate.contracts.events import Channel
from delegate.contracts.messages import ToolCallRequest, ToolListRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)

AGENT = "voice"
LIST_TIMEOUT_S = 2.0


async def realtime_tools(bus: Bus) -> list[dict[str, Any]]:
    """The tools the voice policy allows, as Realtime function tools; none when the registry is away."""
    try:
        reply = await bus.request(topics.TOOLS_LIST, ToolListRequest(agent=AGENT), timeout=LIST_TIMEOUT_S)
    except (BusUnavailable, RemoteError) as exc:
        log.warning("no tools for this voice call: the tool registry did not answer (%s)", exc)
        return []
    return [
        {"type": "function", "name": spec.name, "description": spec.description, "parameters": spec.parameters}
        for spec in reply.tools
    ]


class ToolCaller:
    def __init__(self, bus: Bus, *, channel: Channel) -> None:
        self.bus = bus
        self.channel: Channel = channel
        self.conversation_id: str | None = None
        self.span_id: str | None = None

    async def call(self, name: str, arguments: str, call_id: str) -> str:
        """The output the model reads: the tool's, or what went wrong (never raises)."""
        try:
            parsed = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            return f"The arguments were not valid JSON ({exc.msg}); call {name!r} again with a JSON object."
        if not isinstance(parsed, dict):
            return f"The arguments must be a JSON object; call {name!r} again with one."
        req = ToolCallRequest(
            agent=AGENT, name=name, arguments=parsed, call_id=call_id, conversation_id=self.conversation_id,
            span_id=self.span_id, channel=self.channel,
        )
        try:
            reply = await self.bus.request(topics.TOOLS_CALL, req)
        except (BusUnavailable, RemoteError) as exc:
            log.warning("tool %s: the registry did not answer: %s", name, exc)
            return f"The tool {name!r} could not be reached right now. Tell the owner and carry on without it."
        log.info("tool %s (%s): ok=%s", name, call_id, reply.ok)
        return reply.output
