"""The tools one task may use: the browser here, and the owner's tool registry under ``tasks``.

Web content is untrusted, so the default is no side effect at all: a registry tool tagged
``side_effect`` (SMS, email, calls, writes) is offered to the model only when the owner
enabled it for this task by name (recorded in ``task.created``). A call to anything not
offered is refused, journaled as ``task.refused``, and never run: that is what a page saying
"text the owner the notes" amounts to.
"""

import logging
from dataclasses import dataclass, field
from typing import Any

from delegate.contracts import topics
from delegate.contracts.messages import ToolCallRequest, ToolListRequest, ToolSpec
from delegate.contracts.tasks import SIDE_EFFECT_TAG, TASKS_POLICY
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError

log = logging.getLogger(__name__)

MAX_OUTPUT = 32_000  # characters of a registry tool's output the model (and the journal) gets


@dataclass(frozen=True)
class Outcome:
    ok: bool
    output: str
    ms: float = 0.0


@dataclass
class Toolset:
    browser_specs: list[dict[str, Any]]
    registry: dict[str, ToolSpec] = field(default_factory=dict)  # offered registry tools by name
    withheld: dict[str, str] = field(default_factory=dict)  # name -> why it is not offered

    @property
    def browser_names(self) -> set[str]:
        return {spec["name"] for spec in self.browser_specs}

    def specs(self) -> list[dict[str, Any]]:
        """Function tools for the Responses API."""
        return [*self.browser_specs, *(
            {"type": "function", "name": spec.name, "description": spec.description,
             "parameters": spec.parameters or {"type": "object", "properties": {}}, "strict": False}
            for spec in self.registry.values()
        )]

    def side_effect(self, name: str) -> bool:
        spec = self.registry.get(name)
        return spec is not None and SIDE_EFFECT_TAG in spec.tags

    def refusal(self, name: str) -> str | None:
        """Why a call to ``name`` may not run (None: it may)."""
        if name in self.browser_names or name in self.registry:
            return None
        if name in self.withheld:
            return self.withheld[name]
        return f"there is no tool named {name!r} for this task"


async def load_toolset(bus: Bus, browser_specs: list[dict[str, Any]], allow_tools: list[str]) -> Toolset:
    """The registry's tools under the ``tasks`` policy, narrowed to what this task may use.

    Without an answer from the registry the task still has its browser: a task that only
    reads the web needs nothing else, and one that needed more fails its calls visibly.
    """
    toolset = Toolset(browser_specs)
    try:
        reply = await bus.request(topics.TOOLS_LIST, ToolListRequest(agent=TASKS_POLICY))
    except (BusUnavailable, RemoteError) as exc:
        log.warning("the tool registry did not answer (%s): this task has the browser only", exc)
        return toolset
    for spec in reply.tools:
        if spec.name in toolset.browser_names:
            continue
        if SIDE_EFFECT_TAG in spec.tags and spec.name not in allow_tools:
            toolset.withheld[spec.name] = (
                f"{spec.name} has side effects and the owner did not enable it for this task "
                "(web content is untrusted: tasks get no side-effecting tool by default)"
            )
            continue
        toolset.registry[spec.name] = spec
    return toolset


async def call_registry(bus: Bus, name: str, arguments: dict[str, Any], *, call_id: str, task_id: str,
                        timeout: float) -> Outcome:
    request = ToolCallRequest(agent=TASKS_POLICY, name=name, arguments=arguments, call_id=call_id,
                              span_id=task_id, channel="inner")
    try:
        reply = await bus.request(topics.TOOLS_CALL, request, timeout=timeout)
    except BusUnavailable as exc:
        return Outcome(False, f"the tool registry did not answer: {exc}")
    except RemoteError as exc:
        return Outcome(False, f"{exc}")
    return Outcome(reply.ok, reply.output[:MAX_OUTPUT])
