"""More of the offline demo (issue #31 item 6): what shows the product without a model key.

- "show me a table" is answered with a markdown table (the client renders it);
- a task (the tasks service's runner, recognised by its browser tools) opens its start address
  with the real ``browser_open`` tool, and answers with what the page said, or with why the
  egress policy refused it (the owner allows hosts with TASKS_ALLOWED_HOSTS).
"""

import json
import re
from typing import Any

from delegate.openai_standin.clip import escape, one_line, shorten
from delegate.openai_standin.ids import new_call_id
from delegate.openai_standin.items import content_text, is_user_message, item_text, trailing_tool_outputs
from delegate.openai_standin.planned import ModelInput, Planned, PlannedCall, PlannedText

_TABLE = re.compile(r"\b(?:show|give|make|draw|build|render)\b.*\btable\b|^\s*(?:a\s+)?table\b", re.I | re.S)
_URL = re.compile(r"https?://[^\s<>\"')\]]+", re.I)
OPEN = "browser_open"
PAGE_CHARS = 400

TABLE = (
    "Here is a table, rendered from the markdown I wrote:\n\n"
    "| What | In this offline demo | With a real model |\n"
    "|---|---|---|\n"
    "| Chat, voice, phone, SMS, email | one timeline, all real | the same |\n"
    "| Notes and reminders | real tools, called from your words | any wording |\n"
    "| Tasks in the background | opens a page with the real browser | reads, follows, searches |\n"
    "| Memory | keeps the facts you state | understands them |\n"
    "| Answers | canned, streamed at reading pace | written for you |\n\n"
    "To connect a real model, set `OPENAI_API_KEY` in `.env` and restart Delegate."
)


def wants_table(said: str) -> bool:
    return bool(_TABLE.search(said))


def is_task(request: ModelInput) -> bool:
    return any(tool.get("type") == "function" and tool.get("name") == OPEN for tool in request.tools)


def task_plan(request: ModelInput) -> list[Planned]:
    """A task's next step: open its address once, then answer with what came back."""
    calls = {str(i.get("call_id")): i for i in request.items if i.get("type") == "function_call"}
    outputs = trailing_tool_outputs(request.items)
    if outputs:
        call = calls.get(str(outputs[-1].get("call_id"))) or {}
        return [PlannedText(_report(str(call.get("name", "")), content_text(outputs[-1].get("output"))))]
    if any(i.get("type") == "function_call" for i in request.items):
        return [PlannedText("The offline demo model has done what it can for this task: see the steps above.")]
    goal = "\n".join(item_text(item) for item in request.items if is_user_message(item))
    urls = _URL.findall(goal)
    if not urls:
        return [PlannedText(
            "I'm the offline demo model: I can open a page for a task when you give it a start address "
            "(an http or https URL), but I cannot plan research on my own. Connect a real model for that."
        )]
    return [PlannedCall(OPEN, _arguments(urls[0].rstrip(".,;:")), new_call_id())]


def _arguments(url: str) -> str:
    return json.dumps({"url": url})


def _report(name: str, output: str) -> str:
    if name != OPEN:
        return "The offline demo model cannot use that tool's result; connect a real model for more."
    text = _json_text(output)
    if "refused by the egress policy" in text:
        reason = _inline(text.split("refused by the egress policy:", 1)[-1])
        return (f"I couldn't open the page: the egress policy refused it ({reason}). Allow the host for "
                "tasks (`TASKS_ALLOWED_HOSTS`) and run the task again.")
    title = _field(text, "Title:")
    body = _page_text(text)
    parts = ["I opened the page with the real browser (the offline demo model only reports what it saw)."]
    if title:
        parts.append(f"**{escape(title)}**")
    if body:
        parts.append(f"> {escape(shorten(one_line(body), PAGE_CHARS, markdown=False))}")
    return "\n\n".join(parts)


def _json_text(output: str) -> str:
    try:
        parsed: Any = json.loads(output)
    except ValueError:
        return output
    if isinstance(parsed, dict):
        return str(parsed.get("output") or parsed.get("message") or parsed.get("error") or output)
    return output


def _field(text: str, label: str) -> str:
    for line in text.splitlines():
        if line.startswith(label):
            return _inline(line[len(label):])
    return ""


def _page_text(text: str) -> str:
    """The page's own words: after the title line, before the links."""
    lines = text.splitlines()
    start = next((i + 1 for i, line in enumerate(lines) if line.startswith("Title:")), len(lines))
    body: list[str] = []
    for line in lines[start:]:
        if line.startswith(("Links (numbers", "(Text cut")):
            break
        body.append(line)
    return " ".join(" ".join(body).split())


def _inline(text: str) -> str:
    return escape(shorten(one_line(text), 200, markdown=False))
