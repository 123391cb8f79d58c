"""ChatGPT's ``conversations.json`` export: a list of conversations, each a tree of messages.

Only the branch the owner last saw is taken (``current_node`` and its parents: edited and
regenerated branches are left out), and only user and assistant messages with text parts
(tool output, system prompts, images and hidden messages are left out). ``ref`` is the
message's id, the conversation key the export's conversation id; a problem's "line" is the
conversation's 1-based index in the list.

Each conversation is read through models of the export's shape: lenient where exports vary
(unknown fields, nulls, non-text parts), strict on types, so a field of the wrong type is a
problem named by its path (``mapping.n1.message.author``), never a crash. The list is decoded
one conversation at a time: a 50 MB export is thousands of short steps, not one long one.
"""

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from delegate.contracts.limits import JsonRefused, raw_decode_bounded

from .lines import ImportLine, Problems, first_problem, validate_line

ROLES = ("user", "assistant")
MAX_DEPTH = 100_000  # a parent chain longer than this is a cycle or a corrupt export
MAX_EPOCH = 253_402_300_799  # 9999-12-31T23:59:59Z, the last second a datetime holds

# Seconds since the epoch, as the export writes them (a float, or an int); null when unknown.
Epoch = Annotated[float, Field(allow_inf_nan=False, le=MAX_EPOCH)] | None


class _Shape(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)


class Author(_Shape):
    role: str | None = None


class Content(_Shape):
    content_type: str | None = None
    parts: list[Any] | None = None  # text, or objects (images, files): only the text is taken


class ChatMessage(_Shape):
    id: str | None = None
    author: Author | None = None
    create_time: Epoch = None
    content: Content | None = None
    metadata: dict[str, Any] | None = None


class Node(_Shape):
    parent: str | None = None
    children: list[str] | None = None
    message: ChatMessage | None = None


class Conversation(_Shape):
    id: str | None = None
    conversation_id: str | None = None
    create_time: Epoch = None
    current_node: str | None = None
    mapping: dict[str, Node]


def parse_chatgpt(body: bytes) -> tuple[list[ImportLine], Problems]:
    problems = Problems()
    lines: list[ImportLine] = []
    try:
        for index, item in enumerate(_items(body), start=1):
            lines.extend(_conversation(item, index, len(lines), problems))
    except NotAList:
        problems.add(0, "a ChatGPT export is a JSON list of conversations")
    except JsonRefused as exc:
        problems.add(0, f"not valid JSON: {exc}")
    except (ValueError, RecursionError):  # ValueError covers bad UTF-8 too
        problems.add(0, "not valid JSON")
    if not lines and not problems:
        problems.add(0, "the export holds no user or assistant messages")
    return lines, problems


class NotAList(ValueError):
    pass


def _items(body: bytes) -> Iterator[Any]:
    """The export's conversations, decoded one at a time (``contracts.limits`` bounds each)."""
    text = body.decode()
    at = _skip(text, 0)
    if text[at : at + 1] != "[":
        raw_decode_bounded(text, at)  # not JSON at all says so; JSON of another shape is not a list
        raise NotAList
    at = _skip(text, at + 1)
    if text[at : at + 1] == "]":
        at += 1
    else:
        while True:
            item, at = raw_decode_bounded(text, at, depth=2)  # inside the list
            yield item
            at = _skip(text, at)
            if text[at : at + 1] == "]":
                at += 1
                break
            if text[at : at + 1] != ",":
                raise ValueError("expected , or ] between conversations")
            at = _skip(text, at + 1)
    if _skip(text, at) != len(text):
        raise ValueError("extra data after the list")


def _skip(text: str, at: int) -> int:
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _conversation(item: Any, index: int, ordinal: int, problems: Problems) -> list[ImportLine]:
    if not isinstance(item, dict) or not isinstance(item.get("mapping"), dict):
        problems.add(index, "a conversation must be an object with a mapping")
        return []
    try:
        conversation = Conversation.model_validate(item)
    except ValidationError as exc:
        problems.add(index, first_problem(exc))
        return []
    key = conversation.conversation_id or conversation.id
    if not key:
        problems.add(index, "the conversation has no id")
        return []
    branch = _branch(conversation.mapping, conversation.current_node)
    if branch is None:
        problems.add(index, "current_node is missing, or its parents do not lead to a root")
        return []
    fallback = _epoch(conversation.create_time)
    out: list[ImportLine] = []
    bad = False
    for node_id, node in branch:
        message = node.message
        if message is None:
            continue
        role = message.author.role if message.author is not None else None
        text = _text(message.content)
        if role not in ROLES or not text or _hidden(message):
            continue
        ts = _epoch(message.create_time) or fallback
        if ts is None:
            problems.add(index, f"message {node_id[:100]} has no create_time")
            bad = True
            continue
        fallback = ts  # a later message without a time follows this one
        record = {
            "ts": ts.isoformat(), "role": role, "text": text,
            "conversation": key, "ref": message.id or node_id,
        }
        checked = validate_line(record)
        if isinstance(checked, str):
            problems.add(index, f"message {node_id[:100]}: {checked}")
            bad = True
            continue
        out.append(ImportLine.of(index, ordinal + len(out) + 1, checked))
    return [] if bad else out


def _branch(mapping: dict[str, Node], current: str | None) -> list[tuple[str, Node]] | None:
    """The nodes from the root to ``current_node``, oldest first; None when the chain is broken."""
    if current is None or current not in mapping:
        # Old exports have no current_node: the newest leaf is the one the owner saw last.
        leaves = [k for k, n in mapping.items() if not n.children]
        if not leaves:
            return None
        current = max(leaves, key=lambda k: _node_time(mapping[k]))
    chain: list[tuple[str, Node]] = []
    seen: set[str] = set()
    node_id: str | None = current
    while node_id is not None:
        node = mapping.get(node_id)
        if node is None or node_id in seen or len(chain) > MAX_DEPTH:
            return None
        seen.add(node_id)
        chain.append((node_id, node))
        node_id = node.parent
    chain.reverse()
    return chain


def _node_time(node: Node) -> float:
    value = node.message.create_time if node.message is not None else None
    return value if value is not None else 0.0


def _text(content: Content | None) -> str:
    if content is None or content.parts is None:
        return ""
    if content.content_type not in (None, "text", "multimodal_text"):
        return ""  # code, execution output, browsing results: not something either of them said
    return "\n".join(p for p in content.parts if isinstance(p, str) and p.strip()).strip()


def _hidden(message: ChatMessage) -> bool:
    return message.metadata is not None and bool(message.metadata.get("is_visually_hidden_from_conversation"))


def _epoch(value: float | None) -> datetime | None:
    if value is None or value <= 0:
        return None
    return datetime.fromtimestamp(value, UTC)
