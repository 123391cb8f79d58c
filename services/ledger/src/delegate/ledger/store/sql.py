"""``SqlStore``: the reads both backends answer with the same statements, over two primitives.

A backend supplies ``_fetch`` (every row of one statement) and ``_scan`` (rows offered to a
``Room`` until it refuses one, reading no further), plus what truly differs: the write
transaction, ``query``'s snapshot (``_snapshot``) and ``_span_starts``.
"""

from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from delegate.contracts.events import Event
from delegate.contracts.messages import TermInfo

from .base import ANNOUNCED, Key, LedgerStore, Narrowing, QueryResult, Room, StoredEvent
from .statements import Statements

Offer = Callable[[Sequence[Any]], bool]


class SqlStore(LedgerStore):
    sql: Statements
    snapshot_cols = ""  # columns a backend adds to query's statement for its snapshot (see _snapshot)

    @abstractmethod
    async def _fetch(self, sql: str, params: Sequence[Any] = ()) -> list[Sequence[Any]]:
        """Every row of one read statement (``StoreUnavailable``, ``BadValue`` as the dialect says)."""

    @abstractmethod
    async def _scan(self, sql: str, params: Sequence[Any], room: Room, offer: Offer | None = None) -> None:
        """Offer the rows of ``sql`` to ``room`` (or to ``offer``), in order, until one is refused."""

    @abstractmethod
    async def _snapshot(self, sql: str, params: Sequence[Any], room: Room) -> QueryResult:
        """Offer query's rows to ``room`` and read ``last_seq`` in one snapshot, so that the two agree."""

    async def _query(self, where: Narrowing, room: Room) -> QueryResult:
        sql, params = self.sql.query(where, limit=room.limit, extra_cols=self.snapshot_cols)
        return await self._snapshot(sql, params, room)

    async def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[StoredEvent]:
        stored = self.sql.dialect.stored
        return [stored(r) for r in await self._fetch(sql, params)]

    async def _events(self, sql: str, params: Sequence[Any] = ()) -> list[Event]:
        return [r.event() for r in await self._rows(sql, params)]

    async def _scalar(self, sql: str, params: Sequence[Any] = ()) -> int:
        return int((await self._fetch(sql, params))[0][0])

    async def get(self, *, event_id: str | None = None, client_msg_id: str | None = None) -> Event | None:
        if event_id is not None:
            found = await self._events(self.sql.by_id, (event_id,))
            if found:
                return found[0]
        if client_msg_id is not None:
            found = await self._events(self.sql.by_client_msg_id, (client_msg_id,))
            if found:
                return found[0]
        return None

    async def artifact(self, run_id: str) -> StoredEvent | None:
        found = await self._rows(self.sql.artifact, (run_id,))
        return found[0] if found else None

    async def last_seq(self) -> int:
        return await self._scalar(self.sql.last_seq)

    async def announced_seq(self) -> int:
        return await self._scalar(self.sql.announced_seq, (ANNOUNCED,))

    async def fence_marks(self) -> dict[str, int]:
        return {singleton: int(token) for singleton, token in await self._fetch(self.sql.fence_marks)}

    async def _older(self, before: Key | None, room: Room) -> list[StoredEvent]:
        if before is None:
            await self._scan(self.sql.newest, (room.limit + 1,), room)
        else:
            bind = self.sql.dialect.bind_ts
            await self._scan(self.sql.older, (bind(before[0]), before[1], room.limit + 1), room)
        return room.rows

    async def _between(self, low: Key, high: Key, room: Room) -> list[StoredEvent]:
        bind = self.sql.dialect.bind_ts
        params = (bind(low[0]), low[1], bind(high[0]), high[1], room.limit + 1)
        await self._scan(self.sql.between, params, room)
        return room.rows

    async def _has_older(self, key: Key) -> bool:
        return bool(await self._scalar(self.sql.has_older, (self.sql.dialect.bind_ts(key[0]), key[1])))

    async def _newest_open_conversation(self) -> str | None:
        rows = await self._fetch(self.sql.newest_open_conversation)
        return str(rows[0][0]) if rows else None

    async def _open_span_event(self, conversation_id: str) -> Event | None:
        found = await self._events(self.sql.open_span_event, (conversation_id,))
        return found[0] if found else None

    async def _newest(self, conversation_id: str, kind: str, limit: int, role: str | None = None) -> list[Event]:
        if role is None:
            return await self._events(self.sql.newest_of_kind, (conversation_id, kind, limit))
        return await self._events(self.sql.newest_of_kind_role, (conversation_id, kind, role, limit))

    async def _open_term(self, term_type: str) -> TermInfo | None:
        rows = await self._fetch(self.sql.open_term, (term_type,))
        if not rows:
            return None
        term_id, kind, holder, started_at, started_seq, supersedes = rows[0]
        return TermInfo(
            id=term_id,
            type=kind,
            holder=holder,
            started_at=self.sql.dialect.read_ts(started_at),
            started_seq=started_seq,
            supersedes=supersedes,
        )
