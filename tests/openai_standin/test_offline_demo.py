"""The offline demo: what someone trying Delegate without an OpenAI key sees.

Driven over real HTTP with the official SDK, as the services do. Requests carry the key
`make run` and compose hand out when OPENAI_API_KEY is unset (`offline-standin`); the tools
on offer are the agent's real notes tools, and the capsule request is built by the inner
plane's own prompt code, so a change on either side that breaks the demo fails here.
"""

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai import OpenAI

from delegate.agent.prompts import BASE_INSTRUCTIONS
from delegate.agent.tools.base import Tool
from delegate.agent.tools.local.notes import note_tools
from delegate.contracts.events import Event, Message, make_event
from delegate.inner_plane.memory import parse_items
from delegate.inner_plane.prompts import CAPSULE_INSTRUCTIONS, MEMORY_INSTRUCTIONS, capsule_input, transcript
from delegate.openai_standin.clip import ELLIPSIS, escape, one_line, shorten
from delegate.openai_standin.settings import OFFLINE_KEY, Settings
from tests.support.standin import StandinProcess, start_standin

MODEL = "gpt-5.5"


@pytest.fixture
def notes(tmp_path: Path) -> list[Tool]:
    return note_tools(tmp_path)


def offered(tools: list[Tool]) -> list[dict[str, Any]]:
    """Function tools exactly as the agent's registry offers them to the model."""
    return [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters, "strict": False}
        for t in tools
    ]


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def create(client: OpenAI, **body: Any) -> Any:
    """`responses.create` with a plain dict body (the SDK's param types are beside the point here)."""
    return client.responses.create(**body)


def turn(client: OpenAI, text: str, tools: list[dict[str, Any]], previous: str | None = None) -> Any:
    """One agent-shaped request: instructions, one user item, tools, stored, streamed."""
    extra: dict[str, Any] = {"previous_response_id": previous} if previous else {}
    body: dict[str, Any] = {"model": MODEL, "instructions": BASE_INSTRUCTIONS, "input": [user(text)], "tools": tools}
    with client.responses.stream(**body, store=True, **extra) as stream:
        return stream.get_final_response()


def balanced(text: str) -> bool:
    """Every ``` fence, code span and ** closed; checked independently of the stand-in."""
    fences = [line for line in text.splitlines() if line.startswith("```")]
    if len(fences) % 2:
        return False
    outside = re.sub(r"^```.*?^```[^\n]*$", "", text, flags=re.MULTILINE | re.DOTALL)
    outside = re.sub(r"\\.", "", outside)  # escaped characters are literal
    if outside.count("`") % 2:
        return False
    return re.sub(r"`[^`]*`", "", outside).count("**") % 2 == 0


# -- the first-run guide --------------------------------------------------------------------


def test_first_message_gets_a_short_first_run_guide(demo: OpenAI, notes: list[Tool]) -> None:
    first = turn(demo, "hello there", offered(notes))
    guide = first.output_text

    assert [item.type for item in first.output] == ["message"]
    assert "Delegate" in guide and "offline demo model" in guide
    for channel in ("chat", "voice", "phone", "SMS", "email"):
        assert channel in guide
    assert "one continuous timeline" in guide
    # How to connect a real model, with the markdown kept: a list, bold, a code span.
    assert "`OPENAI_API_KEY`" in guide and "`.env`" in guide and "restart" in guide
    assert re.search(r"^- \*\*", guide, re.MULTILINE) and "**Welcome to Delegate.**" in guide
    assert balanced(guide)
    assert "“hello there”" in guide, "the person's words are acknowledged, not ignored"
    assert len(guide.split()) < 160, "a short guide"

    # The next message of the same relationship is no longer a first contact.
    second = turn(demo, "what's the weather?", offered(notes), previous=first.id)
    assert "Welcome" not in second.output_text
    assert "offline demo model" in second.output_text and "“what's the weather?”" in second.output_text
    assert "`OPENAI_API_KEY`" in second.output_text


def test_a_conversation_with_history_or_a_capsule_gets_no_guide(demo: OpenAI) -> None:
    history = [
        {"type": "message", "role": "user", "content": "[text chat · 2026-05-01 14:03 UTC] hi"},
        {"type": "message", "role": "assistant", "content": "[text chat · 2026-05-01 14:03 UTC] Hello!"},
        user("and now?"),
    ]
    resumed = create(demo, model=MODEL, instructions=BASE_INSTRUCTIONS, input=history)
    assert "Welcome" not in resumed.output_text

    with_capsule = create(
        demo, model=MODEL, instructions=BASE_INSTRUCTIONS + "\n\n## Continuity capsule\n- Likes tea.", input="hi again"
    )
    assert "Welcome" not in with_capsule.output_text


WORD = st.text(alphabet="abcdefghij", min_size=1, max_size=12)
MARKUP = st.sampled_from(["**", "`", "```", "[", "]", "*", "_", "\\", "~"])
TOKEN = st.one_of(
    WORD, WORD, WORD, st.builds(lambda m, w: m + w, MARKUP, WORD), st.builds(lambda w, m: w + m, WORD, MARKUP)
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(TOKEN, min_size=1, max_size=80))
def test_the_guide_quotes_the_person_whole_words_only_and_stays_balanced(demo: OpenAI, words: list[str]) -> None:
    said = " ".join(words)
    guide = create(demo, model=MODEL, input=said).output_text

    assert balanced(guide)
    quoted = re.search(r"You wrote “(.*?)”\. I'm the", guide, re.DOTALL)
    assert quoted is not None, guide
    shown = re.sub(r"\\(.)", r"\1", quoted.group(1))  # the escapes make the words inert
    if shown != said:
        assert shown.endswith(ELLIPSIS)
        kept = shown.removesuffix(ELLIPSIS)
        assert said.startswith(kept) and (kept == "" or said[len(kept)] == " "), "cut between words"


# -- cutting text -----------------------------------------------------------------------------

MD_TOKEN = st.one_of(
    WORD,
    WORD,
    st.builds(lambda w: f"**{w}**", WORD),
    st.builds(lambda a, b: f"**{a} {b}**", WORD, WORD),
    st.builds(lambda a, b: f"`{a} {b}`", WORD, WORD),
    st.builds(lambda a, b: f"[{a} {b}](https://example.org/{a})", WORD, WORD),
    st.builds(lambda w: f"{w}.", WORD),
    st.builds(lambda w: f"\n```py\n{w} {w}\n```\n", WORD),
    st.just("\n- "),
)


@settings(max_examples=400, deadline=None)
@given(tokens=st.lists(MD_TOKEN, min_size=1, max_size=60), limit=st.integers(min_value=1, max_value=400))
def test_shorten_cuts_between_words_and_keeps_markdown_balanced(tokens: list[str], limit: int) -> None:
    text = " ".join(tokens).strip()
    short = shorten(text, limit)

    assert len(short) <= limit
    if len(text) <= limit:
        assert short == text
        return
    assert balanced(short), short
    # What is kept is the text up to a word boundary; only closers and `…` are added.
    added = r"(\n```\n)?…(\*\*)?$|\*\*$"
    assert any(cut_between_words(text, kept) for kept in (short, re.sub(added, "", short).rstrip())), short


@settings(max_examples=200, deadline=None)
@given(words=st.lists(st.one_of(WORD, TOKEN), min_size=1, max_size=40), limit=st.integers(min_value=1, max_value=200))
def test_shorten_plain_words_marks_every_cut(words: list[str], limit: int) -> None:
    """Data such as a quote or a title: cut between words, always with `…`, markup ignored."""
    text = " ".join(words)
    short = shorten(text, limit, markdown=False)
    assert len(short) <= limit
    if len(text) > limit:
        assert short.endswith(ELLIPSIS) and cut_between_words(text, short.removesuffix(ELLIPSIS))
    else:
        assert short == text


def cut_between_words(text: str, kept: str) -> bool:
    return text.startswith(kept) and (kept == "" or len(kept) == len(text) or text[len(kept)].isspace())


def test_escape_makes_markdown_inert() -> None:
    assert escape("**a** `b` [c](d) _e_") == r"\*\*a\*\* \`b\` \[c\](d) \_e\_"
    assert one_line(" a \n b ") == "a b"


# -- notes, through the real tool path --------------------------------------------------------


def test_note_request_calls_the_real_notes_tool_and_confirms_its_result(
    demo: OpenAI, notes: list[Tool], tmp_path: Path
) -> None:
    tools = offered(notes)
    asked = turn(demo, "Please note that my sister lives in Lisbon.", tools)

    assert [item.type for item in asked.output] == ["function_call"]
    call = asked.output[0]
    assert call.name == "notes_create"
    arguments = json.loads(call.arguments)
    create = next(t for t in notes if t.name == "notes_create")
    jsonschema.validate(arguments, create.parameters)
    assert arguments == {"title": "My sister lives in Lisbon", "body": "my sister lives in Lisbon"}

    # The agent runs the real tool, then continues the chain with its output.
    async def run_tool() -> str:
        return await create.handler(arguments)

    output = asyncio.run(run_tool())
    saved = json.loads((tmp_path / "notes.json").read_text())["notes"]
    assert [n["title"] for n in saved] == ["My sister lives in Lisbon"]
    answer: dict[str, Any] = {"type": "function_call_output", "call_id": call.call_id, "output": output}
    chained: dict[str, Any] = {"model": MODEL, "previous_response_id": asked.id, "input": [answer], "tools": tools}
    with demo.responses.stream(**chained) as stream:
        confirmed = stream.get_final_response()
    assert confirmed.output_text.startswith("Saved to your notes: **My sister lives in Lisbon**.")
    assert balanced(confirmed.output_text)


@pytest.mark.parametrize(
    ("said", "noted"),
    [
        ("remember that I prefer short answers", "I prefer short answers"),
        ("take a note: buy tiles for the bathroom", "buy tiles for the bathroom"),
        ("Can you make a note that the wifi password is on the fridge?", "the wifi password is on the fridge?"),
        ("note: dentist is Dr. Sousa", "dentist is Dr. Sousa"),
    ],
)
def test_the_ways_of_asking_for_a_note(demo: OpenAI, notes: list[Tool], said: str, noted: str) -> None:
    asked = create(demo, model=MODEL, input=said, tools=offered(notes))
    assert [item.type for item in asked.output] == ["function_call"]
    arguments = json.loads(asked.output[0].arguments)
    jsonschema.validate(arguments, notes[0].parameters)
    assert arguments["body"] == noted


def test_a_failed_note_is_reported_as_failed(demo: OpenAI, notes: list[Tool]) -> None:
    tools = offered(notes)
    asked = create(demo, model=MODEL, input="note that the boiler is due a service", tools=tools)
    call = asked.output[0]
    failure = json.dumps({"error": "failed", "message": "the notes file is damaged"})
    after = create(
        demo,
        model=MODEL,
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": failure}],
        tools=tools,
    )
    assert after.output_text.startswith("I couldn't save that note: the notes tool said “the notes file is damaged”.")


def test_without_a_notes_tool_on_offer_nothing_is_called(demo: OpenAI, notes: list[Tool]) -> None:
    asked = create(demo, model=MODEL, input="note that my sister lives in Lisbon")
    assert [item.type for item in asked.output] == ["message"]
    assert "no notes tool" in asked.output_text
    # Offered but not callable: tool_choice "none", or an allowed_tools list without it.
    for choice in ("none", {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "x"}]}):
        refused = create(demo, model=MODEL, input="note that x", tools=offered(notes), tool_choice=choice)
        assert [item.type for item in refused.output] == ["message"]


def test_results_of_other_note_tools_are_not_called_saved(
    demo: OpenAI, standin: StandinProcess, notes: list[Tool]
) -> None:
    standin.script({"action": "tool_call", "name": "notes_search", "arguments": {"query": "Lisbon"}, "call_id": "c1"})
    searched = create(demo, model=MODEL, input="what do my notes say about Lisbon?", tools=offered(notes))
    after = create(
        demo,
        model=MODEL,
        previous_response_id=searched.id,
        input=[{"type": "function_call_output", "call_id": "c1", "output": "No notes match 'Lisbon'."}],
        tools=offered(notes),
    )
    assert after.output_text == "Offline stand-in: notes_search returned “No notes match 'Lisbon'.”."


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(limit=st.integers(min_value=1, max_value=60), words=st.lists(WORD, min_size=1, max_size=30))
def test_note_titles_fit_the_schema_and_end_between_words(demo: OpenAI, limit: int, words: list[str]) -> None:
    schema = {
        "type": "object",
        "properties": {"title": {"type": "string", "minLength": 1, "maxLength": limit}, "body": {"type": "string"}},
        "required": ["title"],
        "additionalProperties": False,
    }
    tool = {"type": "function", "name": "notes_create", "parameters": schema, "strict": False}
    what = " ".join(words)
    asked = create(demo, model=MODEL, input=f"note that {what}", tools=[tool])
    arguments = json.loads(asked.output[0].arguments)
    jsonschema.validate(arguments, schema)
    title = arguments["title"].removesuffix(ELLIPSIS)
    full = what[:1].upper() + what[1:]
    assert full.startswith(title) and (len(title) in (0, len(full)) or full[len(title)] == " ")


# -- reminders ------------------------------------------------------------------------------


def test_a_reminder_without_a_reminder_tool_is_honest_and_offers_a_note(demo: OpenAI, notes: list[Tool]) -> None:
    tools = offered(notes)
    asked = turn(demo, "Remind me to call Ana at 5 pm", tools)

    assert [item.type for item in asked.output] == ["message"], "no tool is called that was not offered"
    assert "later version" in asked.output_text and "as a note instead" in asked.output_text
    assert "**Call Ana at 5 pm**" in asked.output_text and balanced(asked.output_text)

    accepted = turn(demo, "yes please", tools, previous=asked.id)
    assert [item.type for item in accepted.output] == ["function_call"]
    arguments = json.loads(accepted.output[0].arguments)
    jsonschema.validate(arguments, notes[0].parameters)
    assert arguments["title"] == "Call Ana at 5 pm"

    # A "yes" that answers nothing we offered is not a note.
    plain = turn(demo, "yes", tools, previous=turn(demo, "hello", tools).id)
    assert [item.type for item in plain.output] == ["message"]


NOTE_TOOL = {"type": "function", "name": "notes_create", "parameters": {"type": "object"}}
REMINDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "text": {"type": "string", "minLength": 1},
        "at": {"type": "string", "format": "date-time"},
        "channel": {"type": "string", "enum": ["text", "sms"]},
    },
    "required": ["text", "at", "channel"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("said", "task", "when"),
    [
        ("remind me in 10 minutes to stretch", "stretch", "in 10 minutes"),
        ("Set a reminder to pay rent tomorrow", "pay rent", "tomorrow"),
        ("can you remind me about the dentist at 9:30 am", "the dentist", "at 9:30 am"),
    ],
)
def test_the_ways_of_asking_for_a_reminder(demo: OpenAI, said: str, task: str, when: str) -> None:
    reminder_tool = {"type": "function", "name": "reminders_create", "parameters": REMINDER_SCHEMA, "strict": False}
    asked = create(demo, model=MODEL, input=said, tools=[reminder_tool])
    arguments = json.loads(asked.output[0].arguments)
    jsonschema.validate(arguments, REMINDER_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert arguments["text"] == task
    offer = create(demo, model=MODEL, input=said, tools=[NOTE_TOOL]).output_text
    assert f"**{task[:1].upper() + task[1:]} {when}**" in offer


def test_without_any_tool_a_reminder_offers_nothing(demo: OpenAI) -> None:
    answer = create(demo, model=MODEL, input="remind me to call Ana at 5 pm").output_text
    assert answer == "I can't set reminders yet: they arrive with a later version of Delegate."


def test_not_every_remind_is_a_reminder(demo: OpenAI) -> None:
    answer = create(demo, model=MODEL, input="remind me what we said about Lisbon").output_text
    assert "later version" not in answer and "“remind me what we said about Lisbon”" in answer


def test_a_reminder_tool_on_offer_is_called_with_the_time_worked_out(demo: OpenAI, notes: list[Tool]) -> None:
    reminder_tool = {"type": "function", "name": "reminders_create", "parameters": REMINDER_SCHEMA, "strict": False}
    tools = [*offered(notes), reminder_tool]
    before = datetime.now(UTC).replace(microsecond=0)
    asked = turn(demo, "please remind me to water the plants in 10 minutes", tools)
    after = datetime.now(UTC)

    assert [item.type for item in asked.output] == ["function_call"]
    call = asked.output[0]
    assert call.name == "reminders_create"
    arguments = json.loads(call.arguments)
    jsonschema.validate(arguments, REMINDER_SCHEMA, format_checker=jsonschema.FormatChecker())
    assert arguments["text"] == "water the plants" and arguments["channel"] == "text"
    due = datetime.fromisoformat(arguments["at"])
    assert before + timedelta(minutes=10) <= due <= after + timedelta(minutes=10)

    confirmed = create(
        demo,
        model=MODEL,
        previous_response_id=asked.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "Reminder r1 set."}],
        tools=tools,
    )
    assert confirmed.output_text.startswith(f"Reminder set: **water the plants** for {arguments['at']}.")


# -- the continuity capsule -----------------------------------------------------------------


def message(role: Any, text: str, channel: Any = "text") -> Event:
    return make_event(Message(text=text), conversation_id="c1", span_id="s1", channel=channel, role=role)


def capsule(client: OpenAI, previous: str | None, turns: list[Event]) -> str:
    """The request the inner plane's capsule refresh makes (unchained, not stored)."""
    response = create(
        client, model=MODEL, instructions=CAPSULE_INSTRUCTIONS, input=capsule_input(previous, turns, 0), store=False
    )
    return str(response.output_text)


def section(text: str, name: str) -> list[str]:
    found = re.search(rf"^\*\*{re.escape(name)}\*\*\n((?:- .*\n?)+)", text, re.MULTILINE)
    return [] if found is None else [line[2:] for line in found.group(1).splitlines()]


def test_the_capsule_lists_the_facts_the_person_stated(demo: OpenAI) -> None:
    turns = [
        message("user", "Hi! My sister lives in Lisbon. What's the weather there?"),
        message("assistant", "I'm the offline demo model, so I can't check the weather."),
        message("user", "I prefer short answers, please."),
        message("user", "my sister lives in Lisbon", channel="sms"),
        message("user", "note that the dentist appointment is on Friday"),
        message("user", "Actually, my sister moved to Porto last year."),
    ]
    text = capsule(demo, None, turns)

    assert section(text, "Established facts") == [
        "“My sister lives in Lisbon.”",
        "“The dentist appointment is on Friday.”",
    ]
    assert section(text, "Preferences") == ["“I prefer short answers, please.”"]
    assert section(text, "Corrections") == ["“Actually, my sister moved to Porto last year.”"]
    assert section(text, "Cross-channel context") == ["The person wrote by text chat.", "The person wrote by SMS."]
    assert section(text, "Commitments") == [] and "Commitments" not in text, "empty sections are left out"
    # Not an echo: no question, nothing the assistant said, none of the prompt.
    for absent in ("weather", "offline demo", "PREVIOUS CAPSULE", "TURNS SINCE", "continuity", "Hi!"):
        assert absent not in text
    assert balanced(text)

    # The next refresh folds the previous capsule in: old facts stay, none twice.
    later = capsule(demo, text, [message("user", "I work at the library. My sister lives in Lisbon.")])
    assert section(later, "Established facts") == [
        "“The dentist appointment is on Friday.”",
        "“I work at the library.”",
        "“My sister lives in Lisbon.”",
    ]
    assert section(later, "Preferences") == ["“I prefer short answers, please.”"]
    assert len(section(later, "Cross-channel context")) == 2


def test_a_capsule_with_nothing_stated_is_still_a_capsule(demo: OpenAI) -> None:
    text = capsule(demo, None, [message("user", "What time is it?"), message("assistant", "Noon.")])
    assert text == (
        "**Established facts**\n- Nothing stated yet.\n\n**Cross-channel context**\n- The person wrote by text chat."
    )
    # The placeholder is not a fact: once one is stated, it goes.
    later = capsule(demo, text, [message("user", "I live in Porto.")])
    assert section(later, "Established facts") == ["“I live in Porto.”"]


def test_memory_extraction_gets_the_stated_facts_as_json(demo: OpenAI) -> None:
    turns = [
        message("user", "My sister lives in Lisbon. Where should I eat?"),
        message("assistant", "I'm the offline demo model."),
        message("user", "I prefer short answers."),
        message("user", "my sister lives in Lisbon"),
    ]
    answer = create(demo, model=MODEL, instructions=MEMORY_INSTRUCTIONS, input=transcript(turns), store=False)
    assert parse_items(answer.output_text) == [
        {"kind": "fact", "text": "My sister lives in Lisbon."},
        {"kind": "preference", "text": "I prefer short answers."},
    ]
    nothing = create(demo, model=MODEL, instructions=MEMORY_INSTRUCTIONS, input=transcript(turns[1:2]))
    assert json.loads(nothing.output_text) == {"items": []}


def test_requests_that_are_not_a_conversation_get_no_guide(demo: OpenAI) -> None:
    # The agent's web_search tool: one request offering the built-in search.
    searched = create(demo, model=MODEL, input="ferry times Lisbon", tools=[{"type": "web_search"}])
    assert [item.type for item in searched.output] == ["web_search_call", "message"]
    assert "Welcome" not in searched.output_text
    # An inner activity wake-up: a developer message, nothing the person said.
    woken = create(
        demo,
        model=MODEL,
        instructions=BASE_INSTRUCTIONS,
        input=[{"type": "message", "role": "developer", "content": "[inner activity] a reminder fired"}],
    )
    assert "Welcome" not in woken.output_text


# -- who gets the demo ------------------------------------------------------------------------


def test_tests_keep_the_plain_answers(client: OpenAI, notes: list[Tool]) -> None:
    """The test key gets the stand-in's plain, predictable answers, whatever was said."""
    assert turn(client, "hello", offered(notes)).output_text == "Offline stand-in: I heard “hello”."
    noted = create(client, model=MODEL, input="note that x is y", tools=offered(notes))
    assert noted.output_text == "Offline stand-in: I heard “note that x is y”."
    plain = capsule(client, None, [message("user", "My sister lives in Lisbon.")])
    assert plain.startswith("Offline stand-in: I heard")


@pytest.mark.integration
def test_standin_demo_setting_overrides_the_key(tmp_path: Path) -> None:
    with start_standin(env={"STANDIN_DEMO": "on"}, log_dir=tmp_path) as forced, forced.client(max_retries=0) as sdk:
        assert "Welcome to Delegate" in create(sdk, model=MODEL, input="hello").output_text
    with (
        start_standin(env={"STANDIN_DEMO": "off"}, log_dir=tmp_path) as plain,
        OpenAI(api_key=OFFLINE_KEY, base_url=plain.base_url, max_retries=0) as sdk,
    ):
        assert create(sdk, model=MODEL, input="hello").output_text == "Offline stand-in: I heard “hello”."


@pytest.mark.parametrize(("raw", "mode"), [("", "auto"), ("1", "on"), ("true", "on"), ("0", "off"), ("Auto", "auto")])
def test_standin_demo_reads_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, raw: str, mode: str) -> None:
    monkeypatch.setenv("STANDIN_DEMO", raw)  # compose passes an unset variable as ""
    assert Settings(_env_file=None).standin_demo == mode
