"""The registry: every callable tool, who may call it, and the one code path that runs it.

``call`` never raises for a tool problem: unknown, denied, bad arguments, timeout, failure and an
unreachable backend all come back as ``ToolCallReply(ok=False, output=<what the model should
read>, error_code=...)``. Every call and its result are ledger events (``tool.call`` /
``tool.result``), refused calls included.

Tags (``ToolSpec.tags`` in ``tools.cmd.list``) say where a tool comes from and what it does;
policies allow by tag, and callers filter on two of them:

- ``local`` or ``mcp`` + ``mcp:<server>``: its source; a family such as ``notes`` or ``github``.
- ``side_effect`` (``base.SIDE_EFFECT``): it changes something outside the conversation: sends
  to the owner, writes notes, memory, reminders or GitHub, or is an MCP tool whose server does
  not declare it ``readOnlyHint: true``. The tasks service offers such a tool to a task only
  when the owner enabled it for that task by name (``TaskCreate.allow_tools``).
- ``starts_task`` (``base.STARTS_TASK``): it starts a durable task (start_task). The ``tasks``
  agent is never offered it nor allowed to call it, whatever the policy file says
  (``Policies.allows``), so a task cannot start tasks.

Apart from that one rule the registry enforces policies only; what ``side_effect`` means for
a caller is that caller's rule.

One concept, so one module past 450 lines: the set of tools and the one path a call takes
through it (lookup, policy, validation, timeout, the two events) change together, and the MCP
servers' tools join and leave that same set on reload; the tools themselves, the policies and
the MCP client live in their own modules.
"""

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from pydantic import ValidationError

from delegate.contracts import topics
from delegate.contracts.events import Event, Fence, ToolCall, ToolResult, make_event
from delegate.contracts.messages import (
    RefusedTool,
    ToolCallReply,
    ToolCallRequest,
    ToolListReply,
    ToolListRequest,
    ToolSpec,
)
from delegate.runtime.bus import Bus, BusUnavailable
from delegate.runtime.metering import Meter
from delegate.runtime.pricing import load_prices

from . import function_rules
from .base import (
    CURRENT_CALL,
    DENIED,
    FAILED,
    INVALID_ARGUMENTS,
    TIMEOUT,
    UNAVAILABLE,
    UNKNOWN_TOOL,
    CallContext,
    ConfigError,
    Tool,
    ToolError,
)
from .config import (
    MCP_FILE,
    POLICIES_FILE,
    McpConfig,
    McpServerConfig,
    Policies,
    file_stamp,
    load_mcp_config,
    load_policies,
)
from .local import local_tools
from .local.calendar import BusCalendarDesk
from .local.call import Caller
from .local.memory import BusMemoryDesk
from .local.owner import Outbox
from .local.reminders import BusReminderDesk
from .local.tasks import BusTaskDesk
from .settings import ToolSettings

if TYPE_CHECKING:  # the MCP SDK (about 300 modules) loads when a server is configured
    from .mcp import McpServer

log = logging.getLogger(__name__)

QUEUE = "tools"  # one registry answers each request even when a standby agent serves too
LEDGER_OUTPUT_LIMIT = 40_000  # characters of output kept in the tool.result event
LEDGER_STRING_LIMIT = 4_000  # longest argument string kept verbatim in the tool.call event
LEDGER_ARGS_LIMIT = 10_000
MAX_TIMEOUT_S = 290.0  # below the bus request timeout of tools.cmd.call (300 s)


class ToolRegistry:
    def __init__(
        self,
        runtime_dir: Path,
        bus: Bus | None,
        *,
        settings: ToolSettings | None = None,
        fence: Callable[[], Fence | None] = lambda: None,
        outbox: Outbox | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.runtime_dir = Path(runtime_dir)
        self.bus = bus
        # The leadership term's fence for the events recorded here (the agent's; see lease.py).
        self.fence = fence
        self.settings = settings or ToolSettings()
        # The agent's sender for the owner-contact tools; without one they are not offered.
        self.outbox = outbox
        self.caller = caller  # asks the voice service to phone the owner (call_owner)
        self._local: dict[str, Tool] = {}
        self._mcp_tools: dict[str, dict[str, Tool]] = {}  # server -> exposed name -> tool
        self._refused: dict[str, list[RefusedTool]] = {}  # server -> its tools OpenAI would refuse
        self._refusals_logged: set[tuple[str, str, str]] = set()  # (server, tool, reason), once each
        self.policies: Policies = Policies()
        self.policies_from_file = False
        self.mcp_config = McpConfig()
        self.servers: dict[str, McpServer] = {}
        self._stamps: dict[str, tuple[int, int, int] | None] = {}
        self._closers: list[Callable[[], Awaitable[None]]] = []
        self._watcher: asyncio.Task[None] | None = None
        self._subs: list[Subscription] = []
        self._inflight: set[asyncio.Task[None]] = set()

    # ---- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Load policies + MCP config (``ConfigError`` naming file and line if either is bad),
        register the local tools, start the MCP clients, then watch both files for changes."""
        self.runtime_dir.mkdir(parents=True, exist_ok=True)
        policies_path, mcp_path = self.runtime_dir / POLICIES_FILE, self.runtime_dir / MCP_FILE
        self._stamps = {POLICIES_FILE: file_stamp(policies_path), MCP_FILE: file_stamp(mcp_path)}
        self.policies, self.policies_from_file = load_policies(self.runtime_dir)
        self.mcp_config = load_mcp_config(self.runtime_dir)
        reminders = BusReminderDesk(self.bus) if self.bus is not None else None
        memory = BusMemoryDesk(self.bus) if self.bus is not None else None
        tasks = BusTaskDesk(self.bus) if self.bus is not None else None
        calendar = BusCalendarDesk(self.bus) if self.bus is not None else None
        tools, self._closers = local_tools(
            self.runtime_dir, self.settings, self.outbox, self.caller, reminders, memory, tasks, calendar,
            meter=Meter(self._record, load_prices(self.runtime_dir)),
        )
        for tool in tools:
            self._local[tool.name] = tool
        for name, config in self.mcp_config.servers.items():
            self._start_server(name, config)
        log.info(
            "tool registry: local tools %s; MCP servers %s; policies %s",
            sorted(self._local),
            sorted(self.servers) or "none",
            str(policies_path) if self.policies_from_file else "default (every agent: local + mcp)",
        )
        # A short grace so the first turn already sees the MCP tools; a slow server joins later.
        await self._wait_connected(self.settings.mcp_start_wait_s)
        self._watcher = asyncio.create_task(self._watch(), name="tool-config-watch")

    async def _wait_connected(self, timeout: float) -> None:
        waits = [asyncio.ensure_future(s.connected.wait()) for s in self.servers.values()]
        if not waits:
            return
        _, pending = await asyncio.wait(waits, timeout=timeout)
        for w in pending:
            w.cancel()
        for name, server in self.servers.items():
            if not server.connected.is_set():
                log.warning("MCP server %r is not connected yet; its tools join when it is", name)

    async def aclose(self) -> None:
        for sub in self._subs:
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("unsubscribe: %r", exc)
        self._subs.clear()
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
            self._watcher = None
        for task in list(self._inflight):
            task.cancel()
        await asyncio.gather(*self._inflight, return_exceptions=True)
        await asyncio.gather(*(s.aclose() for s in self.servers.values()), return_exceptions=True)
        self.servers.clear()
        for close in self._closers:
            try:
                await close()
            except Exception as exc:
                log.debug("closing a tool client: %r", exc)
        self._closers.clear()

    def register(self, tool: Tool) -> None:
        """Add (or replace) a tool provided in-process, e.g. by the agent itself or a benchmark."""
        self._local[tool.name] = tool

    # ---- what is offered ---------------------------------------------------------------------

    def tools(self) -> dict[str, Tool]:
        """Every registered tool, whoever may call it."""
        merged: dict[str, Tool] = {}
        for server_tools in self._mcp_tools.values():
            merged.update(server_tools)
        merged.update(self._local)  # a local name always wins over a clash
        return merged

    def specs(self, agent: str = "base") -> list[ToolSpec]:
        """Only what the agent's policy allows, sorted by name."""
        allowed = [t for t in self.tools().values() if self.policies.allows(agent, t.name, t.tags)]
        return [t.spec(self.settings.tool_timeout_s) for t in sorted(allowed, key=lambda t: t.name)]

    def openai_tools(self, agent: str = "base") -> list[dict[str, Any]]:
        """Responses API function tools (flat shape). ``strict`` is off: our schemas have
        optional properties, which strict mode does not allow."""
        return [
            {"type": "function", "name": s.name, "description": s.description, "parameters": s.parameters,
             "strict": False}
            for s in self.specs(agent)
        ]

    # ---- calling ---------------------------------------------------------------------------

    async def call(self, req: ToolCallRequest) -> ToolCallReply:
        call_event = make_event(
            ToolCall(call_id=req.call_id, name=req.name, arguments=_ledger_arguments(req.arguments), agent=req.agent),
            conversation_id=req.conversation_id,
            span_id=req.span_id,
            channel=req.channel,
            parent_id=req.parent_id,
        )
        # The call event is stored while the tool runs; the result is published only after the
        # call's ack, so the ledger stream always holds the call before its result.
        recording = asyncio.create_task(self._record(call_event))
        context = CURRENT_CALL.set(
            CallContext(req.call_id, call_event.id, req.conversation_id, req.span_id, req.parent_id, req.channel)
        )
        try:
            reply = await self._run(req)
        finally:
            CURRENT_CALL.reset(context)
            await asyncio.shield(recording)
        await self._record(
            make_event(
                ToolResult(
                    call_id=req.call_id,
                    name=req.name,
                    ok=reply.ok,
                    output=_clip(reply.output, LEDGER_OUTPUT_LIMIT),
                    error_code=reply.error_code,
                ),
                conversation_id=req.conversation_id,
                span_id=req.span_id,
                channel=req.channel,
                parent_id=call_event.id,
            )
        )
        return reply

    async def _run(self, req: ToolCallRequest) -> ToolCallReply:
        tool = self.tools().get(req.name)
        if tool is None:
            return self._missing(req)
        if not self.policies.allows(req.agent, tool.name, tool.tags):
            log.info("refused %s for agent %s: not in its policy", req.name, req.agent)
            return _fail(
                DENIED,
                f"The tool {req.name!r} is not allowed for the {req.agent!r} agent (agent-policies.json). "
                "Do not call it again; answer without it or tell the owner it is not permitted.",
            )
        problems = self._invalid(tool, req.arguments)
        if problems:
            schema = json.dumps(tool.parameters, ensure_ascii=False)
            return _fail(
                INVALID_ARGUMENTS,
                f"Invalid arguments for {req.name!r}: {problems}. Call it again with arguments matching "
                f"this JSON schema: {_clip(schema, 3000)}",
            )
        timeout = min(tool.timeout_s or self.settings.tool_timeout_s, MAX_TIMEOUT_S)
        try:
            output = await asyncio.wait_for(tool.handler(dict(req.arguments)), timeout)
        except TimeoutError:
            log.warning("tool %s timed out after %gs", req.name, timeout)
            return _fail(TIMEOUT, f"The tool {req.name!r} did not finish within {timeout:g} seconds and was stopped.")
        except ToolError as exc:
            return _fail(exc.code, f"The tool {req.name!r} failed: {exc.message}")
        except Exception as exc:
            log.exception("tool %s raised", req.name)
            return _fail(FAILED, f"The tool {req.name!r} failed unexpectedly: {type(exc).__name__}: {exc}")
        return ToolCallReply(ok=True, output=_clip(str(output), self.settings.tool_output_limit))

    def _missing(self, req: ToolCallRequest) -> ToolCallReply:
        server_name, sep, _ = req.name.partition("__")
        server = self.servers.get(server_name) if sep else None
        if server is not None and not server.connected.is_set():
            if not self.policies.allows(req.agent, req.name, ("mcp", f"mcp:{server_name}")):
                return _fail(DENIED, f"The tool {req.name!r} is not allowed for the {req.agent!r} agent.")
            return _fail(
                UNAVAILABLE,
                f"The tool {req.name!r} belongs to MCP server {server_name!r}, which is not connected right now "
                "(it is being restarted). Try again later.",
            )
        offered = ", ".join(s.name for s in self.specs(req.agent)) or "none"
        return _fail(UNKNOWN_TOOL, f"There is no tool named {req.name!r}. Tools you can call: {_clip(offered, 2000)}.")

    def _invalid(self, tool: Tool, arguments: dict[str, Any]) -> str | None:
        if not tool.schema_checked:
            # jsonschema (~50 ms of CPU to import) loads with the first call, not with the agent.
            from jsonschema import validators
            from jsonschema.exceptions import SchemaError

            cls = validators.validator_for(tool.parameters)
            try:
                cls.check_schema(tool.parameters)
                tool.validator = cls(tool.parameters)
            except SchemaError as exc:
                log.warning("tool %s has an unusable JSON schema (%s); calling it unvalidated", tool.name, exc.message)
            tool.schema_checked = True
        validator = tool.validator
        if validator is None:
            return None
        errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if not errors:
            return None
        parts = []
        for err in errors[:5]:
            where = "/".join(str(p) for p in err.absolute_path)
            parts.append(f"{err.message} (at {where})" if where else err.message)
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        return "; ".join(parts) + more

    async def _record(self, event: Event) -> None:
        if self.bus is None:
            return
        fence = self.fence()
        if fence is not None:
            # The token in the message id too: a successor's record must not be deduplicated
            # against a deposed term's copy, which the ledger refuses.
            event = event.model_copy(update={"fence": fence})
        msg_id = f"{event.id}:{fence.token}" if fence is not None else event.id
        try:
            await self.bus.publish(topics.ledger_append("agent"), event, msg_id=msg_id, deadline=10.0)
        except BusUnavailable as exc:
            # The call itself must not fail because the ledger's stream is unreachable.
            log.error("could not record %s %s in the ledger: %s", event.kind, event.id, exc)

    # ---- the bus face -----------------------------------------------------------------------

    async def serve(self, bus: Bus) -> None:
        """Answer tools.cmd.list and tools.cmd.call. Each call runs in its own task, so a slow
        tool never holds up the others (a plain NATS callback runs one message at a time)."""

        async def on_list(req: ToolListRequest) -> ToolListReply:
            return ToolListReply(tools=self.specs(req.agent), refused=self.refused())

        self._subs.append(await bus.serve(topics.TOOLS_LIST, on_list, queue=QUEUE))

        async def on_call(msg: Msg) -> None:
            task = asyncio.create_task(self._answer(msg))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)

        self._subs.append(await bus.nc.subscribe(topics.TOOLS_CALL.subject, queue=QUEUE, cb=on_call))

    async def _answer(self, msg: Msg) -> None:
        try:
            req = ToolCallRequest.model_validate_json(msg.data)
        except ValidationError as exc:
            body = {"error": {"code": "bad_request", "message": f"not a ToolCallRequest: {exc.errors()[0]['msg']}"}}
            data = json.dumps(body).encode()
        else:
            try:
                data = (await self.call(req)).model_dump_json().encode()
            except Exception:
                log.exception("a tool call over the bus failed")
                data = json.dumps({"error": {"code": "internal", "message": "the tool registry failed"}}).encode()
        if msg.reply:
            try:
                await msg.respond(data)
            except Exception as exc:
                log.warning("reply to a tool call lost: %r", exc)

    # ---- MCP servers ----------------------------------------------------------------------------

    def _start_server(self, name: str, config: McpServerConfig) -> None:
        if config.disabled:
            log.info("MCP server %r is disabled in %s", name, MCP_FILE)
            return
        from .mcp import McpServer

        server = McpServer(
            name,
            config,
            register=self._register_mcp,
            unregister=self._unregister_mcp,
            probe_interval_s=self.settings.mcp_probe_interval_s,
            max_backoff_s=self.settings.mcp_max_backoff_s,
            log_dir=self.runtime_dir / "logs",
        )
        self.servers[name] = server
        server.start()

    def refused(self) -> list[RefusedTool]:
        """The MCP tools left out because OpenAI would refuse them, with why."""
        return [r for server in sorted(self._refused) for r in self._refused[server]]

    def _register_mcp(self, server: str, tools: list[Tool]) -> None:
        kept: dict[str, Tool] = {}
        refused: list[RefusedTool] = []
        for tool in tools:
            if tool.name in self._local:
                log.warning("MCP tool %s clashes with a local tool; not registered", tool.name)
                continue
            mcp_name = str(tool.meta.get("mcp_name", tool.name))
            reason = function_rules.refusal(tool.name, tool.parameters)
            if reason is None and tool.name in kept:
                reason = f"its name as a function, {tool.name!r}, is taken by another of the server's tools"
            if reason is not None:
                refused.append(RefusedTool(name=tool.name, source=tool.source, tool=mcp_name, reason=reason))
                if (server, mcp_name, reason) not in self._refusals_logged:
                    self._refusals_logged.add((server, mcp_name, reason))
                    log.warning("MCP server %r: tool %r is not offered: %s", server, mcp_name, reason)
                continue
            kept[tool.name] = tool
        self._mcp_tools[server] = kept
        self._refused[server] = refused

    def _unregister_mcp(self, server: str) -> None:
        self._mcp_tools.pop(server, None)
        self._refused.pop(server, None)

    # ---- hot reload ------------------------------------------------------------------------------

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.settings.tools_reload_interval_s)
            try:
                await self.reload_if_changed()
            except Exception:
                log.exception("tool configuration reload failed; keeping the previous configuration")

    async def reload_if_changed(self) -> None:
        """Reload either file whose stamp changed. A bad file keeps the previous good one serving."""
        stamp = file_stamp(self.runtime_dir / POLICIES_FILE)
        if stamp != self._stamps.get(POLICIES_FILE):
            self._stamps[POLICIES_FILE] = stamp
            try:
                self.policies, self.policies_from_file = load_policies(self.runtime_dir)
                log.info("reloaded %s", POLICIES_FILE if self.policies_from_file else "default policies (no file)")
            except ConfigError as exc:
                log.error("bad %s, keeping the previous policies: %s", POLICIES_FILE, exc)
        stamp = file_stamp(self.runtime_dir / MCP_FILE)
        if stamp != self._stamps.get(MCP_FILE):
            self._stamps[MCP_FILE] = stamp
            try:
                config = load_mcp_config(self.runtime_dir)
            except ConfigError as exc:
                log.error("bad %s, keeping the previous MCP servers: %s", MCP_FILE, exc)
                return
            await self._apply_mcp(config)

    async def _apply_mcp(self, config: McpConfig) -> None:
        old = self.mcp_config.servers
        new = config.servers
        gone = [n for n in old if n not in new or new[n] != old[n]]
        for name in gone:
            server = self.servers.pop(name, None)
            if server is not None:
                await server.aclose()
        for name, server_config in new.items():
            if name not in old or name in gone:
                self._start_server(name, server_config)
        self.mcp_config = config
        log.info("reloaded %s: servers %s", MCP_FILE, sorted(new) or "none")


def _fail(code: str, message: str) -> ToolCallReply:
    return ToolCallReply(ok=False, output=message, error_code=code)


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[output truncated: {limit} of {len(text)} characters shown]"


def _ledger_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The arguments as recorded: long strings shortened so one event stays well under its size cap."""

    def shorten(value: Any) -> Any:
        if isinstance(value, str) and len(value) > LEDGER_STRING_LIMIT:
            return f"{value[:LEDGER_STRING_LIMIT]}… [{len(value) - LEDGER_STRING_LIMIT} more characters]"
        if isinstance(value, dict):
            return {k: shorten(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shorten(v) for v in value]
        return value

    recorded: dict[str, Any] = shorten(arguments)
    text = json.dumps(recorded, ensure_ascii=False, default=str)
    if len(text) > LEDGER_ARGS_LIMIT:
        return {"_truncated": True, "preview": text[:LEDGER_STRING_LIMIT]}
    return recorded
