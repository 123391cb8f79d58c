"""The owner's memory: ``GET /api/memory/search``, ``GET /api/memories``, ``PATCH`` and ``DELETE
/api/memories/{id}``.

The memory service owns the index and writes every change as a ledger event (an edit is
``memory.fact.edited``, a forget ``memory.fact.forgotten``); the gateway asks it on
``memory.cmd.search`` and ``memory.cmd.facts`` and passes its answer on. An
``Idempotency-Key`` header becomes the command's ``request_id``, so a retried edit or forget
is one event.
"""

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from delegate.contracts import topics
from delegate.contracts.events import FactType
from delegate.contracts.memory import MemoryFactsCommand, MemoryFactsReply, MemorySearchRequest
from delegate.contracts.topics import Query, Rep, Req
from delegate.runtime.bus import Bus

from .ask import REFUSALS, ask
from .bodies import read_json
from .deps import BusDep, require_owner
from .errors import ApiError
from .http import parse_body
from .idempotency import idempotency_key
from .params import parse_bool, parse_limit

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

MAX_ID = 64
MAX_QUERY = 4000
MAX_LIMIT = 100
MAX_FACTS = 1000  # GET /api/memories?limit=
DEFAULT_LIMIT = 10
# What the memory service's error codes mean at the HTTP edge; anything else is its failure (502).
STATUS = {**REFUSALS, "timeout": 504}


class FactEdit(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(min_length=1, max_length=2000)
    type: FactType | None = None


SILENT = ("memory_unavailable", "the memory service is not answering")


async def ask_memory(bus: Bus, query: Query[Req, Rep], cmd: Req) -> Rep:
    """The memory service's answer, its refusals as the HTTP errors they are."""
    return await ask(bus, query, cmd, silent=SILENT, status=STATUS)


async def ask_facts(bus: Bus, cmd: MemoryFactsCommand) -> MemoryFactsReply:
    return await ask_memory(bus, topics.MEMORY_FACTS, cmd)


def check_fact_id(fact_id: str) -> None:
    if not 1 <= len(fact_id) <= MAX_ID:
        raise ApiError(404, "not_found", f"there is no fact {fact_id[:MAX_ID]!r}")


def one_fact(reply: MemoryFactsReply) -> dict[str, Any]:
    if reply.fact is None:
        raise ApiError(502, "failed", "the memory service answered without the fact")
    return {"fact": reply.fact.model_dump(mode="json"), "event_id": reply.event_id}


@router.get("/memory/search")
async def search(bus: BusDep, q: str | None = None, limit: str | None = None) -> dict[str, Any]:
    """Facts, episodes and messages together, best first; ``refs`` name imported sources."""
    size = parse_limit(limit or None, default=DEFAULT_LIMIT, most=MAX_LIMIT)  # an empty limit is the default
    query = (q or "").strip()
    if not query:
        raise ApiError(400, "bad_request", "q: say what to search for")
    if len(query) > MAX_QUERY:
        raise ApiError(400, "bad_request", f"q: at most {MAX_QUERY} characters")
    reply = await ask_memory(bus, topics.MEMORY_SEARCH, MemorySearchRequest(query=query, limit=size, purpose="owner"))
    return {
        "results": [r.model_dump(mode="json") for r in reply.results],
        "indexed_through_seq": reply.indexed_through_seq,
        "took_ms": reply.took_ms,
    }


@router.get("/memories")
async def list_facts(bus: BusDep, include_retired: str | None = None, limit: str | None = None) -> dict[str, Any]:
    """Every fact with its history; ``include_retired=false`` leaves superseded and forgotten ones out."""
    retired = True if include_retired is None else parse_bool(include_retired, "include_retired")
    size = parse_limit(limit, default=200, most=MAX_FACTS)
    reply = await ask_facts(bus, MemoryFactsCommand(op="list", include_retired=retired, limit=size))
    return {"facts": [f.model_dump(mode="json") for f in reply.facts]}


@router.patch("/memories/{fact_id}")
async def edit_fact(fact_id: str, request: Request, bus: BusDep) -> dict[str, Any]:
    """The owner's rewrite (``memory.fact.edited``); 404 unknown, 409 not a current fact."""
    check_fact_id(fact_id)
    body: FactEdit = parse_body(FactEdit, await read_json(request, limit=16 * 1024))
    cmd = MemoryFactsCommand(
        op="edit", fact_id=fact_id, text=body.text, type=body.type, request_id=idempotency_key(request),
        reason="edited by the owner",
    )
    return one_fact(await ask_facts(bus, cmd))


@router.delete("/memories/{fact_id}")
async def forget_fact(fact_id: str, request: Request, bus: BusDep) -> dict[str, Any]:
    """Forget it (``memory.fact.forgotten``): never retrieved again; 404 unknown, 409 already forgotten."""
    check_fact_id(fact_id)
    cmd = MemoryFactsCommand(
        op="forget", fact_id=fact_id, request_id=idempotency_key(request), reason="forgotten by the owner"
    )
    return one_fact(await ask_facts(bus, cmd))
