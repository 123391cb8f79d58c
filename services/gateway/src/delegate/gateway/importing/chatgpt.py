"""ChatGPT's ``conversations.json`` export: a list of conversations, each a tree of messages.

Only the branch the owner last saw is taken (``current_node`` and its parents: edited and
regenerated branches are left out), and only user and assistant messages with text parts
(tool output, system prompts, images and hidden messages are left out). ``ref`` is the
message's id, the conversation key the export's conversation id; a problem's "line" is the
conversation's 1-based index in the list.
"""

import json
from datetime import UTC, datetime
from typing import Any

from .lines import ImportLine, Problems, validate_line

ROLES = ("user", "assistant")
MAX_DEPTH = 100_000  # a parent chain longer than this is a cycle or a corrupt export


def parse_chatgpt(body: bytes) -> tuple[list[ImportLine], Problems]:
    problems = Problems()
    try:
        export = json.loads(body)
    except (ValueError, RecursionError):
        problems.add(0, "not valid JSON")
        return [], problems
    if not isinstance(export, list):
        problems.add(0, "a ChatGPT export is a JSON list of conversations")
        return [], problems
    lines: list[ImportLine] = []
    for index, conversation in enumerate(export, start=1):
        taken = _conversation(conversation, index, len(lines), problems)
        lines.extend(taken)
    if not lines and not problems:
        problems.add(0, "the export holds no user or assistant messages")
    return lines, problems


def _conversation(item: Any, index: int, ordinal: int, problems: Problems) -> list[ImportLine]:
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        problems.add(index, "a conversation must be an object with a mapping")
        return []
    key = item.get("conversation_id") or item.get("id")
    if not isinstance(key, str) or not key:
        problems.add(index, "the conversation has no id")
        return []
    branch = _branch(item["mapping"], item.get("current_node"))
    if branch is None:
        problems.add(index, "current_node is missing, or its parents do not lead to a root")
        return []
    fallback = _epoch(item.get("create_time"))
    out: list[ImportLine] = []
    bad = False
    for node_id, node in branch:
        message = node.get("message")
        if not isinstance(message, dict):
            continue
        role = (message.get("author") or {}).get("role")
        text = _text(message.get("content"))
        if role not in ROLES or not text or _hidden(message):
            continue
        ts = _epoch(message.get("create_time")) or fallback
        if ts is None:
            problems.add(index, f"message {str(node_id)[:100]} has no create_time")
            bad = True
            continue
        fallback = ts  # a later message without a time follows this one
        record = {
            "ts": ts.isoformat(), "role": role, "text": text,
            "conversation": key, "ref": str(message.get("id") or node_id),
        }
        checked = validate_line(record)
        if isinstance(checked, str):
            problems.add(index, f"message {str(node_id)[:100]}: {checked}")
            bad = True
            continue
        out.append(ImportLine(line=index, ordinal=ordinal + len(out) + 1, data=checked))
    return [] if bad else out


def _branch(mapping: dict[str, Any], current: Any) -> list[tuple[str, dict[str, Any]]] | None:
    """The nodes from the root to ``current_node``, oldest first; None when the chain is broken."""
    if not isinstance(current, str) or current not in mapping:
        # Old exports have no current_node: the newest leaf is the one the owner saw last.
        leaves = [k for k, n in mapping.items() if isinstance(n, dict) and not n.get("children")]
        if not leaves:
            return None
        current = max(leaves, key=lambda k: _node_time(mapping[k]))
    chain: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    node_id: Any = current
    while node_id is not None:
        node = mapping.get(node_id)
        if not isinstance(node, dict) or node_id in seen or len(chain) > MAX_DEPTH:
            return None
        seen.add(node_id)
        chain.append((node_id, node))
        node_id = node.get("parent")
    chain.reverse()
    return chain


def _node_time(node: dict[str, Any]) -> float:
    message = node.get("message")
    value = message.get("create_time") if isinstance(message, dict) else None
    return float(value) if isinstance(value, int | float) else 0.0


def _text(content: Any) -> str:
    if not isinstance(content, dict):
        return ""
    if content.get("content_type") not in (None, "text", "multimodal_text"):
        return ""  # code, execution output, browsing results: not something either of them said
    parts = content.get("parts")
    if not isinstance(parts, list):
        return ""
    return "\n".join(p for p in parts if isinstance(p, str) and p.strip()).strip()


def _hidden(message: dict[str, Any]) -> bool:
    metadata = message.get("metadata")
    return isinstance(metadata, dict) and bool(metadata.get("is_visually_hidden_from_conversation"))


def _epoch(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return None
    try:
        return datetime.fromtimestamp(value, UTC)
    except (OverflowError, OSError, ValueError):
        return None
