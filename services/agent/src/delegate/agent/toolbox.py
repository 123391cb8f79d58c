"""The agent's use of the tool registry (``delegate.agent.tools``), through its public interface only.

The registry validates arguments, applies per-agent policy and timeouts, and publishes the
``tool.call`` / ``tool.result`` events itself. A configuration file the registry cannot read
stops the agent with an error naming the file and line (the owner must fix it, and a
silently tool-less assistant would hide the mistake). Any other start failure leaves the
agent running without tools, answering a stray function call with an ``unknown_tool``
result (recorded here, so the timeline stays complete).
"""

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from delegate.contracts.events import ToolCall, ToolResult, make_event
from delegate.contracts.messages import ToolCallReply, ToolCallRequest
from delegate.runtime.bus import Bus

from .ledger import Ledger
from .model import FunctionCall
from .outbound import Outbox
from .settings import Settings
from .tools import ConfigError, ToolRegistry, ToolSettings

log = logging.getLogger(__name__)

AGENT_NAME = "base"

# A tool a turn provides itself (an activation's nothing_to_do): run here, recorded like any.
OwnHandler = Callable[[dict[str, Any]], Awaitable[ToolCallReply]]


class Toolbox:
    def __init__(self, registry: ToolRegistry | None, ledger: Ledger) -> None:
        self.registry = registry
        self.ledger = ledger

    @classmethod
    async def start(cls, settings: Settings, bus: Bus, ledger: Ledger, outbox: Outbox | None = None) -> "Toolbox":
        """``outbox``: how the owner-contact tools send (the same sender as sms/email replies)."""
        registry = ToolRegistry(
            settings.runtime_data_dir, bus, settings=tool_settings(settings), fence=lambda: ledger.fence,
            outbox=outbox, caller=outbox,
        )
        try:
            await registry.start()
        except ConfigError as exc:
            log.critical("cannot start: %s", exc)
            raise SystemExit(2) from None
        except Exception:
            log.exception("tool registry failed to start: running without tools")
            return cls(None, ledger)
        return cls(registry, ledger)

    async def serve(self, bus: Bus) -> None:
        """Answer ``tools.cmd.*`` on this connection (the leader's), if there is a registry."""
        if self.registry is not None:
            await self.registry.serve(bus)

    def definitions(self) -> list[dict[str, Any]]:
        if self.registry is None:
            return []
        try:
            return list(self.registry.openai_tools(agent=AGENT_NAME))
        except Exception:
            log.exception("listing tools failed: this request offers none")
            return []

    async def run(
        self,
        call: FunctionCall,
        *,
        conversation_id: str | None,
        span_id: str | None,
        channel: Any,
        parent_id: str,
        own: Mapping[str, OwnHandler] | None = None,
    ) -> dict[str, Any]:
        """Run one function call; always returns its ``function_call_output`` item.

        ``own``: the turn's own tools, which win over a registry tool of the same name.
        """
        try:
            parsed = json.loads(call.arguments or "{}")
            arguments = parsed if isinstance(parsed, dict) else {"value": parsed}
            bad_json = None
        except json.JSONDecodeError as exc:
            arguments, bad_json = {}, str(exc)
        request = ToolCallRequest(
            agent=AGENT_NAME,
            name=call.name,
            arguments=arguments,
            call_id=call.call_id,
            conversation_id=conversation_id,
            span_id=span_id,
            channel=channel,
            parent_id=parent_id,
        )
        if bad_json is not None:
            reply = ToolCallReply(
                ok=False, output=f"arguments are not valid JSON: {bad_json}", error_code="invalid_arguments"
            )
            await self._record(request, reply)
        elif own is not None and call.name in own:
            reply = await own[call.name](arguments)
            await self._record(request, reply)
        elif self.registry is None:
            reply = ToolCallReply(
                ok=False, output=f"no tool named {call.name!r} is available", error_code="unknown_tool"
            )
            await self._record(request, reply)
        else:
            try:
                reply = await self.registry.call(request)
            except Exception as exc:
                log.exception("tool %s crashed", call.name)
                reply = ToolCallReply(ok=False, output=f"the tool failed: {exc!r}"[:2000], error_code="failed")
                await self._record(request, reply)
        if reply.ok:
            output = reply.output
        else:
            output = json.dumps({"error": reply.error_code or "failed", "message": reply.output})
        return {"type": "function_call_output", "call_id": call.call_id, "output": output}

    async def _record(self, request: ToolCallRequest, reply: ToolCallReply) -> None:
        """Events for calls that never reached the registry (it records its own)."""
        call = make_event(
            ToolCall(call_id=request.call_id, name=request.name, arguments=request.arguments),
            conversation_id=request.conversation_id, span_id=request.span_id, channel=request.channel,
            parent_id=request.parent_id,
        )
        await self.ledger.append(call)
        await self.ledger.append(
            make_event(
                ToolResult(
                    call_id=request.call_id, name=request.name, ok=reply.ok, output=reply.output,
                    error_code=reply.error_code,
                ),
                conversation_id=request.conversation_id, span_id=request.span_id, channel=request.channel,
                parent_id=request.parent_id,
            )
        )

    async def aclose(self) -> None:
        if self.registry is not None:
            try:
                await self.registry.aclose()
            except Exception:
                log.exception("closing the tool registry")


def tool_settings(settings: Settings) -> ToolSettings:
    """The registry's settings with the model endpoint taken from the agent's own settings: the
    process environment may be shared with other services (``delegate.host``)."""
    endpoint = settings.openai_client_options() or {}
    return ToolSettings(
        runtime_data_dir=settings.runtime_data_dir,
        openai_api_key=endpoint.get("api_key"),
        openai_base_url=endpoint.get("base_url"),
    )
