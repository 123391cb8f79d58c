"""What a tool is, and the one exception a handler raises to report a problem to the model."""

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from delegate.contracts.events import Channel
from delegate.contracts.messages import ToolSpec
from delegate.contracts.tasks import SIDE_EFFECT_TAG

# Stable error codes in ToolCallReply.error_code and the tool.result event.
DENIED = "denied"  # the agent's policy does not allow the tool
UNKNOWN_TOOL = "unknown_tool"
INVALID_ARGUMENTS = "invalid_arguments"  # the arguments do not match the tool's JSON schema
TIMEOUT = "timeout"
FAILED = "failed"  # the tool ran and reported (or raised) an error
UNAVAILABLE = "unavailable"  # its backend (an MCP server, GitHub, SMTP, ...) cannot be reached right now

# Tags with a meaning beyond grouping (see registry.py).
# The tool changes something outside the conversation (sends, writes, deletes, schedules). A
# durable task may only call one the owner enabled for it by name (TaskCreate.allow_tools).
SIDE_EFFECT = SIDE_EFFECT_TAG  # the contract's name: the tasks service filters on it
# The tool starts a durable task. The ``tasks`` policy never allows it, whatever a policy file
# says, or one runaway goal could fan out into tasks of its own.
STARTS_TASK = "starts_task"

Handler = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True)
class CallContext:
    """The call a handler runs for: what a tool needs to tie its own records to the call."""

    call_id: str
    event_id: str  # the ``tool.call`` event's id
    conversation_id: str | None = None
    span_id: str | None = None
    parent_id: str | None = None  # what the call answers: the turn's user message (or activation)
    channel: Channel = "text"  # the channel of the turn that made the call


# Set by the registry around each handler: handlers keep their one-argument signature, and the
# few tools that record something of their own (the owner-contact tools) read it.
CURRENT_CALL: ContextVar[CallContext | None] = ContextVar("CURRENT_CALL", default=None)


class ToolError(Exception):
    """A problem the model should read: becomes ``ToolCallReply(ok=False, output=message)``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class ConfigError(Exception):
    """A configuration file the registry cannot use; the message names the file (and line)."""


@dataclass
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object
    handler: Handler
    tags: tuple[str, ...] = ("local",)
    timeout_s: float | None = None  # None: the registry's TOOL_TIMEOUT_S
    source: str = "local"  # "local" or "mcp:<server>"
    meta: dict[str, Any] = field(default_factory=dict)
    # The compiled argument validator, built on first call (None after: the schema is unusable).
    validator: Any = field(default=None, init=False, repr=False, compare=False)
    schema_checked: bool = field(default=False, init=False, repr=False, compare=False)

    def spec(self, default_timeout_s: float) -> ToolSpec:
        return ToolSpec(
            name=self.name,
            description=self.description,
            tags=list(self.tags),
            parameters=self.parameters,
            timeout_s=self.timeout_s or default_timeout_s,
        )


def object_schema(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    """A closed arguments schema: unknown keys are a clear error, not silently ignored."""
    schema: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        schema["required"] = required
    return schema
