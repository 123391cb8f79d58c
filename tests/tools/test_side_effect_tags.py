"""What a task may call, as the tasks service sees it: ``tools.cmd.list`` for the ``tasks`` agent,
answered by the real agent process, with every channel configured and a real MCP server."""

from collections.abc import AsyncIterator

import pytest

from delegate.agent.tools import SIDE_EFFECT, STARTS_TASK
from delegate.contracts.messages import ToolSpec
from delegate.runtime.bus import Bus
from tests.support.system import System
from tests.support.waiting import eventually

from .agent_process import OFFLINE_MODEL, offered
from .helpers import bus_call, stdio_server, write_json

pytestmark = pytest.mark.integration

# Configured, never reached: listing a tool does not run it.
CHANNELS = {
    "TWILIO_ACCOUNT_SID": "AC" + "1" * 32, "TWILIO_AUTH_TOKEN": "unused", "TWILIO_PHONE_NUMBER": "+15550002222",
    "OWNER_PHONE": "+15550001111", "SMTP_HOST": "127.0.0.1", "OWNER_EMAIL": "owner@example.test",
    "GITHUB_TOKEN": "unused", "GITHUB_API_BASE_URL": "http://127.0.0.1:9", "GITHUB_REPOS": "owner/repo",
}

CHANGES_THINGS = {
    "send_sms_to_owner", "send_email_to_owner", "call_owner",
    "github_create_issue", "github_comment",
    "notes_create", "notes_update", "notes_delete",
    "set_reminder", "change_reminder", "cancel_reminder",
    "memory_remember", "memory_forget", "commitment_update",
    "kit__hang", "kit__exit_process", "kit__fail",  # no annotations: the MCP default is not read-only
}
ONLY_READS = {
    "web_search", "notes_list", "notes_search", "memory_recall", "list_reminders", "check_task", "commitments_list",
    "github_list_issues", "github_get_issue", "github_list_pull_requests",
    "kit__echo", "kit__add", "kit__pid",  # readOnlyHint: true
}


@pytest.fixture
async def bus(system: System) -> AsyncIterator[Bus]:
    system.extra_env.update(OFFLINE_MODEL, **CHANNELS)
    system.runtime.mkdir(parents=True)
    # No agent-policies.json: the default policies, as a fresh install has them.
    write_json(system.runtime / "mcp-servers.json", {"servers": {"kit": stdio_server()}})
    system.start("ledger", "agent")
    assert system.nats is not None
    connection = await Bus.connect(system.nats.url, "side-effect-test")
    yield connection
    await connection.close()


async def test_every_tool_a_task_is_offered_says_whether_it_changes_things(bus: Bus) -> None:
    specs = await offered(bus, "tasks", "kit__echo", "kit__fail", "send_sms_to_owner")
    # Every tool is sorted into one of the two sets: a new tool has to be decided on here.
    assert set(specs) == CHANGES_THINGS | ONLY_READS
    tagged = {name for name, spec in specs.items() if SIDE_EFFECT in spec.tags}
    assert tagged == CHANGES_THINGS
    assert specs["kit__add"].tags == ["mcp", "mcp:kit"]
    assert specs["kit__fail"].tags == ["mcp", "mcp:kit", SIDE_EFFECT]
    assert specs["notes_create"].tags == ["local", "notes", SIDE_EFFECT]


async def test_a_task_never_gets_start_task_whatever_the_policy_file_says(system: System, bus: Bus) -> None:
    base = await offered(bus, "base", "start_task", "check_task")
    # Starting a task sends nothing anywhere: not a side effect, but a task may not do it.
    assert STARTS_TASK in base["start_task"].tags and SIDE_EFFECT not in base["start_task"].tags
    assert not {STARTS_TASK, SIDE_EFFECT} & set(base["check_task"].tags)
    tasks = await offered(bus, "tasks", "notes_create", "kit__echo")
    assert set(base) - set(tasks) == {"start_task"}

    # An owner who allows every tool to every agent still does not let a task start tasks.
    write_json(system.runtime / "agent-policies.json",
               {"agents": {"*": {"allow_tags": ["*"], "deny_names": ["notes_delete"]}}})

    async def reloaded() -> dict[str, ToolSpec] | None:
        specs = await offered(bus, "tasks", "notes_create")
        return specs if "notes_delete" not in specs else None

    widened = await eventually(reloaded, what="the agent read the new policy file")
    assert "start_task" not in widened and "check_task" in widened
    refused = await bus_call(bus, "start_task", {"goal": "Start two more tasks"}, agent="tasks")
    assert refused.error_code == "denied"
    assert "start_task" in await offered(bus, "base", "notes_create")
