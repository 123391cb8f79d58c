"""Memory: remember / recall / forget, in SQLite with an FTS5 index under RUNTIME_DATA_DIR.

A deliberately simple store for now (the inner plane's extraction may feed it later): recall
ranks by BM25 over the words of the query, any word matching.
"""

import asyncio
import json
import re
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from delegate.contracts.ids import format_ts, new_id, utcnow

from ..base import FAILED, Tool, ToolError, object_schema

T = TypeVar("T")

MEMORY_FILE = "memory.sqlite"
WORD = re.compile(r"\w+", re.UNICODE)

SCHEMA = """
CREATE TABLE IF NOT EXISTS memories (
    id TEXT PRIMARY KEY,
    text TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL
);
CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5(text, tags, content='memories', content_rowid='rowid');
CREATE TRIGGER IF NOT EXISTS memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, text, tags) VALUES (new.rowid, new.text, new.tags);
END;
CREATE TRIGGER IF NOT EXISTS memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, text, tags) VALUES ('delete', old.rowid, old.text, old.tags);
END;
"""


def fts_query(text: str) -> str | None:
    """Any of the query's words, each quoted so FTS5 syntax in user text is inert."""
    terms = sorted({w.lower() for w in WORD.findall(text)})
    return " OR ".join(f'"{t}"' for t in terms) if terms else None


class MemoryStore:
    def __init__(self, runtime_dir: Path) -> None:
        self.path = runtime_dir / MEMORY_FILE
        self._lock = asyncio.Lock()
        self._ready = False

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=5.0)
        # Rollback journal + FULL sync: safe on a mounted network volume too, and fast enough here.
        conn.execute("PRAGMA synchronous=FULL")
        if not self._ready:
            conn.executescript(SCHEMA)
            self._ready = True
        return conn

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._lock:
            return await asyncio.to_thread(self._with_conn, fn, *args)

    def _with_conn(self, fn: Callable[..., T], *args: Any) -> T:
        conn = self._connect()
        try:
            with conn:
                return fn(conn, *args)
        finally:
            conn.close()

    @staticmethod
    def _remember(conn: sqlite3.Connection, text: str, tags: list[str]) -> dict[str, Any]:
        item = {"id": new_id(), "text": text, "tags": tags, "created_at": format_ts(utcnow())}
        conn.execute(
            "INSERT INTO memories(id, text, tags, created_at) VALUES (?, ?, ?, ?)",
            (item["id"], text, json.dumps(tags), item["created_at"]),
        )
        return item

    @staticmethod
    def _recall(conn: sqlite3.Connection, query: str, limit: int) -> list[dict[str, Any]]:
        match = fts_query(query)
        if match is None:
            return []
        rows = conn.execute(
            "SELECT m.id, m.text, m.tags, m.created_at FROM memories_fts f JOIN memories m ON m.rowid = f.rowid "
            "WHERE memories_fts MATCH ? ORDER BY bm25(memories_fts) LIMIT ?",
            (match, limit),
        ).fetchall()
        return [{"id": r[0], "text": r[1], "tags": json.loads(r[2]), "created_at": r[3]} for r in rows]

    @staticmethod
    def _forget(conn: sqlite3.Connection, memory_id: str) -> dict[str, Any] | None:
        row = conn.execute("SELECT id, text FROM memories WHERE id = ?", (memory_id,)).fetchone()
        if row is None:
            return None
        conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
        return {"id": row[0], "text": row[1]}

    async def remember(self, text: str, tags: list[str] | None = None) -> dict[str, Any]:
        return await self._run(self._remember, text, tags or [])

    async def recall(self, query: str, limit: int = 10) -> list[dict[str, Any]]:
        return await self._run(self._recall, query, limit)

    async def forget(self, memory_id: str) -> dict[str, Any] | None:
        return await self._run(self._forget, memory_id)


def memory_tools(runtime_dir: Path) -> list[Tool]:
    store = MemoryStore(runtime_dir)

    async def remember(args: dict[str, Any]) -> str:
        item = await store.remember(args["text"], args.get("tags"))
        return f"Remembered {item['id']}: {item['text']}"

    async def recall(args: dict[str, Any]) -> str:
        items = await store.recall(args["query"], args.get("limit", 10))
        if not items:
            return f"Nothing remembered about {args['query']!r}."
        return "\n".join(json.dumps(i, ensure_ascii=False) for i in items)

    async def forget(args: dict[str, Any]) -> str:
        item = await store.forget(args["id"])
        if item is None:
            raise ToolError(FAILED, f"no memory with id {args['id']!r}; use memory_recall to find ids")
        return f"Forgot {item['id']}: {item['text']}"

    tag = ("local", "memory")
    tags = {"type": "array", "items": {"type": "string", "maxLength": 100}, "maxItems": 20}
    return [
        Tool("memory_remember", "Remember a fact, preference or commitment about the owner for later.",
             object_schema({"text": {"type": "string", "minLength": 1, "maxLength": 4000}, "tags": tags}, ["text"]),
             remember, tag),
        Tool("memory_recall", "Recall remembered facts that share words with the query, best match first.",
             object_schema({"query": {"type": "string", "minLength": 1},
                            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "default": 10}}, ["query"]),
             recall, tag),
        Tool("memory_forget", "Forget one remembered fact by id.",
             object_schema({"id": {"type": "string", "minLength": 1}}, ["id"]), forget, tag),
    ]
