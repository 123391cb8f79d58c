"""Notes: a JSON file under RUNTIME_DATA_DIR, replaced atomically on every change.

Every operation re-reads the file under a cross-process lock, so two processes sharing the
runtime dir (an agent and its standby) never lose each other's writes.
"""

import asyncio
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts.ids import format_ts, new_id, utcnow

from ..base import FAILED, SIDE_EFFECT, Tool, ToolError, object_schema
from ..files import locked, write_json_atomic

T = TypeVar("T")

NOTES_FILE = "notes.json"
WORD = re.compile(r"\w+", re.UNICODE)
MAX_TEXT = 100_000


def words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text)}


class NoteStore:
    def __init__(self, runtime_dir: Path) -> None:
        self.path = runtime_dir / NOTES_FILE
        self._lock = asyncio.Lock()  # one writer per process; ``locked`` covers other processes

    def _read(self) -> list[dict[str, Any]]:
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except json.JSONDecodeError as exc:
            raise ToolError(FAILED, f"the notes file {self.path} is damaged (line {exc.lineno}): {exc.msg}") from exc
        return list(data.get("notes", []))

    def _write(self, notes: list[dict[str, Any]]) -> None:
        write_json_atomic(self.path, {"version": 1, "notes": notes})

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            return await asyncio.to_thread(self._locked_call, fn, *args)

    def _locked_call(self, fn: Callable[..., T], *args: Any) -> T:
        with locked(self.path):
            return fn(*args)

    # ---- operations (run in a worker thread, under both locks) --------------------------

    def _create(self, title: str, body: str, tags: list[str]) -> dict[str, Any]:
        notes = self._read()
        now = format_ts(utcnow())
        note = {"id": new_id(), "title": title, "body": body, "tags": tags, "created_at": now, "updated_at": now}
        notes.append(note)
        self._write(notes)
        return note

    def _update(self, note_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        notes = self._read()
        for note in notes:
            if note["id"] == note_id:
                changes = dict(changes)
                extra = changes.pop("append", None)
                note.update(changes)
                if extra is not None:
                    note["body"] = f"{note['body']}\n{extra}" if note["body"] else extra
                note["updated_at"] = format_ts(utcnow())
                self._write(notes)
                return note
        raise ToolError(FAILED, f"no note with id {note_id!r}; use notes_list or notes_search to find ids")

    def _delete(self, note_id: str) -> dict[str, Any]:
        notes = self._read()
        kept = [n for n in notes if n["id"] != note_id]
        if len(kept) == len(notes):
            raise ToolError(FAILED, f"no note with id {note_id!r}; use notes_list or notes_search to find ids")
        self._write(kept)
        return next(n for n in notes if n["id"] == note_id)

    # ---- async API -------------------------------------------------------------------------

    async def create(self, title: str, body: str = "", tags: list[str] | None = None) -> dict[str, Any]:
        return await self._run(self._create, title, body, tags or [])

    async def update(self, note_id: str, changes: dict[str, Any]) -> dict[str, Any]:
        return await self._run(self._update, note_id, changes)

    async def delete(self, note_id: str) -> dict[str, Any]:
        return await self._run(self._delete, note_id)

    async def all(self) -> list[dict[str, Any]]:
        return await self._run(self._read)

    async def search(self, query: str, limit: int) -> list[dict[str, Any]]:
        wanted = words(query)
        scored = []
        for note in await self.all():
            have = words(" ".join([note["title"], note["body"], *note.get("tags", [])]))
            score = len(wanted & have)
            if score:
                scored.append((score, note["updated_at"], note))
        scored.sort(key=lambda s: (s[0], s[1]), reverse=True)
        return [s[2] for s in scored[:limit]]


def _brief(note: dict[str, Any]) -> str:
    tags = f" [{', '.join(note['tags'])}]" if note.get("tags") else ""
    return f"- {note['id']}: {note['title']}{tags} (updated {note['updated_at']})"


def _full(note: dict[str, Any]) -> str:
    return json.dumps(note, ensure_ascii=False)


def note_tools(runtime_dir: Path) -> list[Tool]:
    store = NoteStore(runtime_dir)
    title = {"type": "string", "minLength": 1, "maxLength": 500, "description": "short title"}
    body = {"type": "string", "maxLength": MAX_TEXT, "description": "the note's text"}
    tags = {"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 50}
    note_id = {"type": "string", "minLength": 1, "description": "the note's id"}
    limit = {"type": "integer", "minimum": 1, "maximum": 200, "default": 20}

    async def create(args: dict[str, Any]) -> str:
        note = await store.create(args["title"], args.get("body", ""), args.get("tags"))
        return f"Created note {note['id']}: {_full(note)}"

    async def list_(args: dict[str, Any]) -> str:
        notes = await store.all()
        if tag := args.get("tag"):
            notes = [n for n in notes if tag in n.get("tags", [])]
        notes.sort(key=lambda n: n["updated_at"], reverse=True)
        if not notes:
            return "No notes yet." if not args.get("tag") else f"No notes tagged {args['tag']!r}."
        shown = notes[: args.get("limit", 20)]
        return f"{len(notes)} note(s), newest first:\n" + "\n".join(_brief(n) for n in shown)

    async def search(args: dict[str, Any]) -> str:
        found = await store.search(args["query"], args.get("limit", 10))
        if not found:
            return f"No notes match {args['query']!r}."
        return "\n".join(_full(n) for n in found)

    async def update(args: dict[str, Any]) -> str:
        changes: dict[str, Any] = {k: args[k] for k in ("title", "body", "tags", "append") if k in args}
        if not changes:
            raise ToolError(FAILED, "nothing to change: give title, body, tags or append")
        note = await store.update(args["id"], changes)
        return f"Updated note {note['id']}: {_full(note)}"

    async def delete(args: dict[str, Any]) -> str:
        note = await store.delete(args["id"])
        return f"Deleted note {note['id']} ({note['title']!r})."

    tag = ("local", "notes")
    writes = (*tag, SIDE_EFFECT)  # the owner's notes outlive the conversation that changed them
    return [
        Tool("notes_create", "Create a note for the owner (title, body, optional tags).",
             object_schema({"title": title, "body": body, "tags": tags}, ["title"]), create, writes),
        Tool("notes_list", "List notes, newest first, optionally only those with a tag.",
             object_schema({"tag": {"type": "string"}, "limit": limit}), list_, tag),
        Tool("notes_search", "Find notes whose title, body or tags contain the query's words.",
             object_schema({"query": {"type": "string", "minLength": 1}, "limit": limit}, ["query"]), search, tag),
        Tool("notes_update", "Change a note: new title, body or tags, or append text to its body.",
             object_schema({"id": note_id, "title": title, "body": body, "tags": tags,
                            "append": {"type": "string", "maxLength": MAX_TEXT}}, ["id"]), update, writes),
        Tool("notes_delete", "Delete a note by id.", object_schema({"id": note_id}, ["id"]), delete, writes),
    ]
