"""The two operator files under RUNTIME_DATA_DIR: ``agent-policies.json`` and ``mcp-servers.json``.

agent-policies.json::

    {"agents": {
        "base":  {"allow_tags": ["local", "mcp"], "allow_names": ["web_search"], "deny_names": []},
        "voice": {"allow_tags": ["notes", "memory"], "allow_names": ["web_search"]},
        "*":     {"allow_tags": ["local"]}}}

A tool is offered to an agent when one of its tags is in ``allow_tags`` or its name matches
``allow_names``, and its name matches no ``deny_names`` (names may be fnmatch globs such as
``github_*`` or ``files__*``; the tag ``*`` allows everything). An agent missing from the file
uses the ``"*"`` entry; without one it gets nothing. A missing file means DEFAULT_POLICIES.
Whatever the file says, the ``tasks`` agent (durable tasks) never gets a tool tagged
``starts_task``.

mcp-servers.json::

    {"servers": {
        "files":  {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"],
                   "env": {"KEY": "${SOME_ENV_VAR}"}, "cwd": null, "timeout_s": 30, "disabled": false},
        "remote": {"url": "http://127.0.0.1:8000/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"},
                   "timeout_s": 60}}}

``${VAR}`` in env values and headers is expanded from the registry's environment.
"""

import fnmatch
import json
import os
import re
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from delegate.contracts.tasks import TASKS_POLICY

from .base import STARTS_TASK, ConfigError

M = TypeVar("M", bound=BaseModel)

POLICIES_FILE = "agent-policies.json"
MCP_FILE = "mcp-servers.json"

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]{1,32}$")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AgentPolicy(_Strict):
    allow_tags: list[str] = Field(default_factory=list)
    allow_names: list[str] = Field(default_factory=list)
    deny_names: list[str] = Field(default_factory=list)

    def allows(self, name: str, tags: tuple[str, ...] | list[str]) -> bool:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in self.deny_names):
            return False
        if "*" in self.allow_tags or any(tag in self.allow_tags for tag in tags):
            return True
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allow_names)


class Policies(_Strict):
    agents: dict[str, AgentPolicy] = Field(default_factory=dict)

    def for_agent(self, agent: str) -> AgentPolicy | None:
        return self.agents.get(agent) or self.agents.get("*")

    def allows(self, agent: str, name: str, tags: tuple[str, ...] | list[str]) -> bool:
        if agent == TASKS_POLICY and STARTS_TASK in tags:
            # Not left to a policy file: an owner widening "*" must not let a task start tasks.
            return False
        policy = self.for_agent(agent)
        return policy is not None and policy.allows(name, tags)


# No policy file: every agent may use the local tools (notes, memory, web_search and the
# configured channel/GitHub tools) and the tools of the MCP servers the owner configured.
# Both sources are set up by the owner on this machine; a policy file narrows them. The
# ``tasks`` agent gets them too: the tasks service keeps side effects from a task unless the
# owner enabled them for it, and ``allows`` keeps start_task from every task.
DEFAULT_POLICIES = Policies(agents={"*": AgentPolicy(allow_tags=["local", "mcp"])})


class McpServerConfig(_Strict):
    command: str | None = None
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    timeout_s: float | None = Field(default=None, gt=0, le=290)
    disabled: bool = False

    @model_validator(mode="after")
    def _one_transport(self) -> "McpServerConfig":
        if bool(self.command) == bool(self.url):
            raise ValueError('give exactly one of "command" (stdio) or "url" (streamable HTTP)')
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError('"url" must be an http:// or https:// URL')
        return self

    def expanded_env(self) -> dict[str, str]:
        return {k: os.path.expandvars(v) for k, v in self.env.items()}

    def expanded_headers(self) -> dict[str, str]:
        return {k: os.path.expandvars(v) for k, v in self.headers.items()}


class McpConfig(_Strict):
    servers: dict[str, McpServerConfig] = Field(default_factory=dict)

    @field_validator("servers")
    @classmethod
    def _names(cls, servers: dict[str, McpServerConfig]) -> dict[str, McpServerConfig]:
        for name in servers:
            if not SERVER_NAME.match(name):
                raise ValueError(f"server name {name!r} must be 1-32 letters, digits, '_' or '-'")
        return servers


def read_json(path: Path) -> Any:
    """The parsed file; ``ConfigError`` naming the file and line when it is not valid JSON."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc


def _validate(path: Path, model: type[M], data: Any) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors()[:5]:
            where = ".".join(str(p) for p in err["loc"]) or "top level"
            problems.append(f"{where}: {err['msg']}")
        raise ConfigError(f"{path}: {'; '.join(problems)}") from exc


def load_policies(runtime_dir: Path) -> tuple[Policies, bool]:
    """The policies and whether they came from the file (False: DEFAULT_POLICIES)."""
    path = runtime_dir / POLICIES_FILE
    if not path.exists():
        return DEFAULT_POLICIES, False
    return _validate(path, Policies, read_json(path)), True


def load_mcp_config(runtime_dir: Path) -> McpConfig:
    path = runtime_dir / MCP_FILE
    if not path.exists():
        return McpConfig()
    return _validate(path, McpConfig, read_json(path))


def file_stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is rewritten (None: missing); the inode catches an editor's
    rename-over-the-old-file even within one mtime tick."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)
