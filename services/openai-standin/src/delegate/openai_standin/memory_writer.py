"""The offline demo's memory extraction: the inner plane's checkpoint transcript in, the
person's stated facts out, as the JSON its prompt asks for (`{"items": [...]}`)."""

import json

from delegate.openai_standin import facts

MARK = "extract durable memories"  # what the memory extractor's instructions say


def is_memory_request(instructions: str) -> bool:
    return MARK in instructions.lower()


def write(text: str) -> str:
    items: list[dict[str, str]] = []
    seen: set[str] = set()
    for turn in facts.turn_lines(text):
        if turn.role != "user":
            continue
        for statement in facts.stated(turn.text):
            if facts.key(statement.text) not in seen:
                seen.add(facts.key(statement.text))
                items.append({"kind": statement.kind, "text": statement.text})
    return json.dumps({"items": items}, ensure_ascii=False)
