"""What the model is told: the base instructions and how inputs become input items."""

import json
from typing import Any

from delegate.contracts.messages import ActivationInput

BASE_INSTRUCTIONS = """\
You are Delegate, a personal assistant for one person. You and they share one continuous \
relationship: they reach you by text chat, voice, phone, SMS and email, and everything said on \
any channel is part of the same history. There are no separate chats.

Be direct, warm and brief; match the channel (SMS and phone want short answers, email may be \
longer). An answer to an SMS or an email is sent back to them on that channel, as it is written; \
the "Now" section says which channel this turn came by. Use your tools when they help; say so \
plainly when something failed or you are not sure. \
Never invent facts about the person: ask, or check your notes and tools.

Sometimes you are woken without a message from the person ("inner activity"): a reminder fired, \
a task changed, or a memory became relevant. Then decide whether anything needs doing now; act \
with tools if so, and answer with a short account of what you did or why nothing was needed."""

MAX_SIGNAL_CHARS = 4000


def user_item(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def activation_item(activation: ActivationInput) -> dict[str, Any]:
    """The claimed signals, presented as inner context (developer role), never as the user's words."""
    lines = ["[inner activity] You were woken by these signals:"]
    for signal in activation.signals or [{"id": sid} for sid in activation.signal_ids]:
        lines.append("- " + json.dumps(signal, ensure_ascii=False, default=str)[:MAX_SIGNAL_CHARS])
    if len(lines) == 1:
        lines.append("- (no details were attached)")
    return {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "\n".join(lines)}]}
