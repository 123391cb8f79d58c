"""The offline demo: what the stand-in answers when it stands in for a real model.

With no OPENAI_API_KEY, `make run` (and compose) point the services at the stand-in, and
these answers are the whole first impression. They stay honest (this is not a model)
and show that the rest is real:
- the first message of a fresh relationship gets a short first-run guide;
- "note that …" becomes a call to the notes tool the request offers, and its result a
  confirmation; "remind me to … in …" likewise with a reminder tool, or, with none on
  offer, an honest "not yet" and an offer to save it as a note ("yes" does);
- the inner plane's capsule and memory requests get the facts the person stated
  (`capsule_writer`, `memory_writer`), and a web search the stand-in's invented results;
- "show me a table" gets a markdown table, and a background task opens its start address with
  the real browser tool (``demo_extras``);
- anything else is acknowledged as what an offline demo cannot answer.
Answers stream at a reading pace (STANDIN_DEMO_PACE_MS), so Stop can be seen working.
Test runs keep the plain "Offline stand-in: I heard …" answers (`Settings.demo_for`).
"""

import json
from typing import Any

from delegate.openai_standin import capsule_writer, demo_extras, intents, memory_writer, websearch
from delegate.openai_standin.clip import escape, one_line, shorten
from delegate.openai_standin.ids import new_call_id
from delegate.openai_standin.items import (
    Item,
    content_text,
    is_user_message,
    item_text,
    trailing_tool_outputs,
)
from delegate.openai_standin.planned import ModelInput, Planned, PlannedCall, PlannedText

QUOTE_CHARS = 120
# Said when a reminder cannot be set; a "yes" after it saves the reminder as a note.
NOTE_OFFER = "Shall I save it as a note instead?"

CONNECT = "To connect a real model, set `OPENAI_API_KEY` in `.env` (or in the environment) and restart Delegate."
GUIDE = (
    "**Welcome to Delegate.** You wrote {quote}. I'm the **offline demo model**, not a real AI, "
    "so I can't truly answer, but everything around me is real.\n\n"
    "Delegate is a personal assistant with **one continuous timeline**: text chat, voice, "
    "phone, SMS and email all land in the same history, and it remembers across them.\n\n"
    "Try what works offline:\n"
    "- **Notes:** say “note that my sister lives in Lisbon” and I save it with the real notes tool.\n"
    "- **Reminders:** say “remind me to call Ana in 10 minutes”.\n"
    "- **Memory:** tell me about yourself; the continuity capsule keeps the facts you state.\n\n" + CONNECT
)
FALLBACK = (
    "I'm the offline demo model, so I can't really answer {quote}. I can take notes "
    "(“note that …”), and the continuity capsule keeps what you tell me. " + CONNECT
)


def plan(request: ModelInput) -> list[Planned] | None:
    """The demo's answer, or None to leave the request to the stand-in's defaults."""
    kind = (request.text_format or {}).get("type")
    if kind in ("json_schema", "json_object"):
        return None  # structured output is for programs, not a demo
    text = "\n".join(item_text(item) for item in request.items if is_user_message(item))
    if capsule_writer.is_capsule_request(request.instructions, text):
        return [PlannedText(capsule_writer.write(request.instructions, text))]
    if memory_writer.is_turn_request(request.instructions):
        return [PlannedText(memory_writer.write_turn(text))]
    if memory_writer.is_memory_request(request.instructions):
        return [PlannedText(memory_writer.write(text, request.instructions))]
    if websearch.find_tool(request.tools) is not None:
        return None  # the web search tool's own request: the stand-in's invented search answers it
    if demo_extras.is_task(request):
        return demo_extras.task_plan(request)  # a background task: it may open its page for real
    if trailing_tool_outputs(request.items):
        confirmed = confirm(request.items)
        return None if confirmed is None else [PlannedText(confirmed)]
    said = _last_user_text(request.items)
    if said is None:
        return None
    if (what := intents.note_request(said)) is not None and what:
        if (tool := _tool(request, intents.NOTE)) is not None:
            return [_call(tool, intents.note_arguments(tool, what))]
        return [PlannedText("I'd save that as a note, but no notes tool is available to me right now.")]
    if (reminder := intents.reminder_request(said)) is not None:
        if (tool := _tool(request, intents.REMINDER)) is not None:
            return [_call(tool, intents.reminder_arguments(tool, reminder))]
        later = "I can't set reminders yet: they arrive with a later version of Delegate."
        if _tool(request, intents.NOTE) is None:
            return [PlannedText(later)]
        what = intents.note_title(f"{reminder.task} {reminder.when}".strip())
        return [PlannedText(f"{later} {NOTE_OFFER} It would read **{_inline(what)}**. Say “yes” and I'll note it.")]
    if demo_extras.wants_table(said):
        return [PlannedText(demo_extras.TABLE)]
    offered = _offered_note(request.items) if intents.is_yes(said) else None
    if offered is not None and (tool := _tool(request, intents.NOTE)) is not None:
        return [_call(tool, intents.note_arguments(tool, offered))]
    template = GUIDE if first_contact(request) else FALLBACK
    return [PlannedText(template.format(quote=quote(said)))]


def first_contact(request: ModelInput) -> bool:
    """The first message of a fresh relationship: nothing said before, no capsule kept."""
    if capsule_writer.MARK in request.instructions.lower():
        return False
    users = 0
    for item in request.items:
        kind, role = item.get("type"), item.get("role")
        if kind == "message" and role == "user":
            users += 1
        elif kind != "message" or role == "assistant":  # an answer, a tool round, a compaction
            return False
    return users == 1


def confirm(items: list[Item]) -> str | None:
    """Words for the results of the demo's own note and reminder calls."""
    calls = {str(i.get("call_id")): i for i in items if i.get("type") == "function_call"}
    lines: list[str] = []
    for output in trailing_tool_outputs(items):
        call = calls.get(str(output.get("call_id")))
        name = str((call or {}).get("name", ""))
        if not (intents.creates(name, intents.NOTE) or intents.creates(name, intents.REMINDER)):
            return None  # not ours: the stand-in's usual account of tool results
        arguments = _json_object((call or {}).get("arguments"))
        failure = _failure(content_text(output.get("output")))
        what = _inline(str(_first(arguments, intents.TITLE_NAMES + intents.TEXT_NAMES) or "it"))
        if intents.creates(name, intents.REMINDER):
            if failure is not None:
                lines.append(f"I couldn't set that reminder: the reminder tool said “{_inline(failure)}”.")
            else:
                due = _first(arguments, intents.TIME_NAMES)
                lines.append(f"Reminder set: **{what}**" + (f" for {_inline(str(due))}." if due else "."))
        elif failure is not None:
            lines.append(f"I couldn't save that note: the notes tool said “{_inline(failure)}”.")
        else:
            lines.append(f"Saved to your notes: **{what}**.")
    if not lines:
        return None
    return " ".join(lines) + " (The offline demo model wrote this, but the tool call was real.)"


def quote(said: str) -> str:
    return f"“{_inline(said)}”"


def _inline(text: str) -> str:
    return escape(shorten(one_line(text), QUOTE_CHARS, markdown=False))


def _tool(request: ModelInput, topic: str) -> dict[str, Any] | None:
    return intents.find_tool(request.tools, topic, request.tool_choice, request.max_tool_calls)


def _call(tool: dict[str, Any], arguments: str) -> PlannedCall:
    return PlannedCall(str(tool["name"]), arguments, new_call_id())


def _last_user_text(items: list[Item]) -> str | None:
    for item in reversed(items):
        if item.get("type") == "message":
            # Only a user message at the end is something new to answer; an inner activity
            # wake-up (a developer message) or our own answer is not.
            return content_text(item.get("content")) if item.get("role") == "user" else None
    return None


def _offered_note(items: list[Item]) -> str | None:
    """The reminder the previous answer offered to save as a note, if it did."""
    answers = [i for i, item in enumerate(items) if item.get("type") == "message" and item.get("role") == "assistant"]
    if not answers or NOTE_OFFER not in content_text(items[answers[-1]].get("content")):
        return None
    for item in reversed(items[: answers[-1]]):
        if is_user_message(item):
            reminder = intents.reminder_request(content_text(item.get("content")))
            return None if reminder is None else f"{reminder.task} {reminder.when}".strip()
    return None


def _failure(output: str) -> str | None:
    """The message of a tool error (the agent sends `{"error": code, "message": ...}`)."""
    parsed = _json_object(output)
    if "error" in parsed:
        return str(parsed.get("message") or parsed["error"])
    return None


def _json_object(raw: object) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _first(arguments: dict[str, Any], names: tuple[str, ...]) -> object:
    return next((arguments[n] for n in arguments if n.lower() in names and arguments[n]), None)
