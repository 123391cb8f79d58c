"""The local tool providers, built from settings: only what is configured is registered."""

from collections.abc import Awaitable, Callable
from pathlib import Path

from delegate.runtime.metering import Meter

from ..base import Tool
from ..settings import ToolSettings
from .calendar import CalendarDesk, calendar_tools
from .call import Caller, call_tool
from .commitments import commitment_tools
from .github import github_tools
from .memory import MemoryDesk, memory_tools
from .notes import note_tools
from .owner import Outbox, email_tool, sms_tool
from .reminders import ReminderDesk, reminder_tools
from .tasks import TaskDesk, task_tools
from .web_search import web_search_tool


def local_tools(
    runtime_dir: Path,
    settings: ToolSettings,
    outbox: Outbox | None = None,
    caller: Caller | None = None,
    reminders: ReminderDesk | None = None,
    memory: MemoryDesk | None = None,
    tasks: TaskDesk | None = None,
    calendar: CalendarDesk | None = None,
    *,
    meter: Meter,
) -> tuple[list[Tool], list[Callable[[], Awaitable[None]]]]:
    """The tools and the closers of the clients they hold.

    The owner-contact tools need the agent's outbox (the pollers send): without one, none.
    The memory tools ask the memory service; without a bus to it they answer "unavailable".
    ``meter`` records the usage of the model calls a tool makes (web_search).
    """
    tools = [*note_tools(runtime_dir), *memory_tools(memory), *commitment_tools(memory)]
    closers: list[Callable[[], Awaitable[None]]] = []
    if settings.openai_api_key or settings.openai_base_url:
        search, client = web_search_tool(settings, meter)
        tools.append(search)
        closers.append(client.close)
    if outbox is not None and settings.sms_configured:
        tools.append(sms_tool(settings, outbox))
    if outbox is not None and settings.email_configured:
        tools.append(email_tool(settings, outbox))
    if caller is not None and settings.sms_configured:  # the same Twilio number and owner phone
        tools.append(call_tool(caller))
    if reminders is not None:  # the inner plane keeps them: only with a bus to ask it on
        tools.extend(reminder_tools(reminders))
    if tasks is not None:  # the tasks service runs them: only with a bus to ask it on
        tools.extend(task_tools(tasks))
    if calendar is not None and settings.caldav_url:  # the pollers own the calendar
        tools.extend(calendar_tools(calendar, settings.owner_timezone))
    if settings.github_token:
        gh_tools, gh = github_tools(settings)
        tools.extend(gh_tools)
        closers.append(gh.aclose)
    return tools, closers
