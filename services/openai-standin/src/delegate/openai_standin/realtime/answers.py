"""What the stand-in says in a response, deterministically.

In order: a scripted `answer`; with `response.instructions` (how a greeting is asked
for) the first quoted phrase in them, else the rest of a line after "say:" (or "say
exactly:", "greet the caller with:"), else a default greeting; after tool results
`Offline stand-in: <name> returned “<output>”.`; after a user turn
`Offline stand-in: I heard “<words>”.` (the offline demo says how to connect a real model
instead); otherwise the default greeting."""

import re

from delegate.openai_standin.clip import one_line, shorten
from delegate.openai_standin.realtime.conversation import Conversation, Item
from delegate.openai_standin.realtime.script import RealtimeStep

PREFIX = "Offline stand-in:"
GREETING = "Hello, this is the offline stand-in. How can I help?"
DEMO_GREETING = (
    "Hello! This is Delegate's offline demo voice. I cannot understand words yet, "
    "but I hear when you speak. Connect a real model to talk for real."
)
DEMO_HEARD = (
    "I heard you, but this offline demo cannot understand words. Set OPENAI_API_KEY and "
    "restart Delegate to talk with a real model; what we say here stays in your timeline."
)
HEARD_CHARS = 200
OUTPUT_CHARS = 120
# “curly” or "straight" quotes around at least two characters (not single quotes:
# apostrophes would pair up).
_QUOTED = re.compile(r"“([^”]{2,})”|\"([^\"]{2,})\"")
# Or what follows "say:" / "say exactly:" / "greet with:" up to the end of the line.
_SAY = re.compile(r"\b(?:say|greet(?: the \w+)?(?: with)?)(?: exactly| this| only)?\s*:\s*(.+)", re.IGNORECASE)


def answer_text(
    conversation: Conversation, step: RealtimeStep | None, instructions: str | None, *, demo: bool = False
) -> str:
    if step is not None and step.answer is not None:
        return step.answer
    if instructions is not None:
        return greeting(instructions, demo=demo)
    outputs = conversation.trailing_outputs()
    if outputs:
        results = [_returned(conversation, o) for o in outputs]
        return f"{PREFIX} {'; '.join(results)}."
    user = conversation.last_user_turn()
    if user is not None:
        if demo:  # someone trying Delegate: say what to do, not what a test checks
            return DEMO_HEARD
        heard = conversation.facts_of(user["id"]).heard
        return f"{PREFIX} I heard “{_clip(heard, HEARD_CHARS)}”."
    return DEMO_GREETING if demo else GREETING


def greeting(instructions: str, *, demo: bool = False) -> str:
    found = _QUOTED.search(instructions)
    if found is not None:
        return one_line(next(group for group in found.groups() if group))
    said = _SAY.search(instructions)
    if said is not None and said.group(1).strip():
        return one_line(said.group(1))
    return DEMO_GREETING if demo else GREETING


def _returned(conversation: Conversation, output: Item) -> str:
    name = conversation.call_name(str(output.get("call_id")))
    return f"{name} returned “{_clip(str(output.get('output', '')), OUTPUT_CHARS)}”"


def _clip(text: str, limit: int) -> str:
    return shorten(one_line(text), limit, markdown=False)
