"""Memory on the bus: search, the owner's control of facts, and import progress.

The memory service answers these from its index, a projection of the ledger's memory and
message events (rebuildable from them); every change it makes is an event through the ledger.
"""

from datetime import datetime
from typing import Literal

from pydantic import Field

from .events import FactType, ImportLineError
from .messages import BusModel, Reply

ResultKind = Literal["fact", "episode", "message"]
Purpose = Literal["owner", "turn", "voice", "activation"]


class MemorySearchRequest(BusModel):
    query: str = Field(min_length=1, max_length=4000)
    limit: int = Field(default=10, ge=1, le=100)
    kinds: list[ResultKind] | None = None  # None: all three
    # "owner": the search box (messages, episodes and facts alike); the others feed a model
    # request: forgotten facts' turns are left out, adaptations come first, ``budget_tokens`` cuts.
    purpose: Purpose = "owner"
    budget_tokens: int | None = Field(default=None, ge=1, le=100_000)
    # Events the model already has verbatim (recent turns): not offered again.
    exclude_event_ids: list[str] = Field(default_factory=list, max_length=500)
    now: datetime | None = None  # "last May" is read relative to this (default: the service's clock)


class MemoryResult(BusModel):
    kind: ResultKind
    id: str  # the fact id, the episode's event id, or the message's event id
    text: str
    score: float
    ts: datetime  # a fact's valid_at, an episode's end, a message's ts
    event_ids: list[str] = Field(default_factory=list)  # the ledger events it stands for / cites
    refs: list[str] = Field(default_factory=list)  # the ``ref``s of imported source events
    type: FactType | None = None  # facts only
    speaker: str | None = None
    channel: str | None = None
    conversation_id: str | None = None
    why: list[str] = Field(default_factory=list)  # what ranked it: "text", "time:2023-05", "recent", …


class MemorySearchReply(Reply):
    results: list[MemoryResult] = Field(default_factory=list)
    adaptations: list[MemoryResult] = Field(default_factory=list)  # purpose != owner: always given
    tokens: int = 0  # estimate of results + adaptations (purpose != owner)
    indexed_through_seq: int = 0
    took_ms: float = 0.0


FactStatus = Literal["active", "superseded", "forgotten"]


class FactChange(BusModel):
    """One step of a fact's history, as its event said it."""

    kind: str  # memory.fact.added / cited / edited / forgotten, or "superseded"
    event_id: str
    ts: datetime
    text: str | None = None
    by: str | None = None  # superseded: the successor's fact id


class MemoryFact(BusModel):
    id: str
    type: FactType
    text: str
    status: FactStatus
    valid_at: datetime
    invalid_at: datetime | None = None  # when superseded: the successor's valid_at
    superseded_by: str | None = None
    supersedes: list[str] = Field(default_factory=list)
    event_ids: list[str] = Field(default_factory=list)  # every citation, merged duplicates included
    refs: list[str] = Field(default_factory=list)
    origin: str = "turn"
    created_at: datetime
    updated_at: datetime
    history: list[FactChange] = Field(default_factory=list)


class MemoryFactsCommand(BusModel):
    """``list`` (facts with their history), ``get``, ``edit``, ``forget``, ``remember``.

    ``request_id`` makes a change idempotent (its event id derives from it): a retried edit
    or a redelivered tool call writes nothing twice.
    """

    op: Literal["list", "get", "edit", "forget", "remember"]
    fact_id: str | None = Field(default=None, max_length=64)
    text: str | None = Field(default=None, min_length=1, max_length=2000)
    type: FactType | None = None
    include_retired: bool = True  # list: superseded and forgotten ones too
    limit: int = Field(default=200, ge=1, le=1000)
    request_id: str | None = Field(default=None, max_length=200)
    event_ids: list[str] = Field(default_factory=list, max_length=50)  # remember: what it cites
    conversation_id: str | None = None
    span_id: str | None = None
    reason: str = Field(default="", max_length=500)


class MemoryFactsReply(Reply):
    facts: list[MemoryFact] = Field(default_factory=list)
    fact: MemoryFact | None = None
    event_id: str | None = None  # the change's event, committed when this reply is sent


class ImportStatusRequest(BusModel):
    import_id: str = Field(min_length=1, max_length=64)


class ImportStatus(Reply):
    import_id: str = ""
    status: Literal["running", "done", "failed"] = "running"
    events: int = 0  # written so far (of ``total``)
    total: int = 0
    indexed: int = 0  # imported messages in the search index
    conversations: int = 0
    errors: list[ImportLineError] = Field(default_factory=list)
