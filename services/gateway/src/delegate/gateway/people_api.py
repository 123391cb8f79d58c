"""The owner's people and commitments (issue #30): ``GET /api/people``, ``GET``/``PATCH``/``DELETE
/api/people/{id}`` and ``GET /api/commitments?state=``.

The memory service owns both (its index is their projection) and writes every change as a ledger
event (``person.updated``, ``person.forgotten``); the gateway asks it on ``memory.cmd.people`` and
``memory.cmd.commitments``. An ``Idempotency-Key`` header becomes the command's ``request_id``.
Knowing a person never lets them in: inbound SMS and email are the owner's only, whoever the
sender is in here (``twilio_webhooks`` and the pollers never read people).
"""

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from delegate.contracts import topics
from delegate.contracts.people import (
    CommitmentsCommand,
    CommitmentsReply,
    KeyDate,
    PeopleCommand,
    PeopleReply,
)
from delegate.runtime.bus import Bus

from .bodies import read_json
from .deps import BusDep, require_owner
from .errors import ApiError
from .http import parse_body
from .idempotency import idempotency_key
from .memory_api import ask_memory

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

MAX_ID = 64
STATES = ("open", "kept", "dropped", "all")


class PersonDate(BaseModel):
    model_config = ConfigDict(extra="forbid")
    label: str = Field(min_length=1, max_length=100)
    date: str = Field(pattern=r"^(\d{4}-)?(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$")


class PersonEdit(BaseModel):
    """What the owner changes; a field left out stays as it is, a list given replaces the list."""

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    aliases: list[str] | None = Field(default=None, max_length=20)
    relation: str | None = Field(default=None, max_length=200)
    phones: list[str] | None = Field(default=None, max_length=20)
    emails: list[str] | None = Field(default=None, max_length=20)
    dates: list[PersonDate] | None = Field(default=None, max_length=20)


async def ask_people(bus: Bus, cmd: PeopleCommand) -> PeopleReply:
    return await ask_memory(bus, topics.MEMORY_PEOPLE, cmd)


async def ask_commitments(bus: Bus, cmd: CommitmentsCommand) -> CommitmentsReply:
    return await ask_memory(bus, topics.MEMORY_COMMITMENTS, cmd)


def check_id(person_id: str) -> None:
    if not 1 <= len(person_id) <= MAX_ID:
        raise ApiError(404, "not_found", f"there is no person {person_id[:MAX_ID]!r}")


@router.get("/people")
async def list_people(bus: BusDep) -> dict[str, Any]:
    """Everyone the owner's turns mention (forgotten people never), the most recently seen first."""
    reply = await ask_people(bus, PeopleCommand(op="list"))
    return {"people": [p.model_dump(mode="json") for p in reply.people]}


@router.get("/people/{person_id}")
async def get_person(person_id: str, bus: BusDep) -> dict[str, Any]:
    """One person: facts with their citations, recent mentions, upcoming key dates."""
    check_id(person_id)
    reply = await ask_people(bus, PeopleCommand(op="get", person_id=person_id))
    if reply.person is None:
        raise ApiError(502, "failed", "the memory service answered without the person")
    return {"person": reply.person.model_dump(mode="json")}


@router.patch("/people/{person_id}")
async def edit_person(person_id: str, request: Request, bus: BusDep) -> dict[str, Any]:
    """The owner's edit (``person.updated``); 404 unknown or forgotten, 400 a bad phone or email."""
    check_id(person_id)
    body: PersonEdit = parse_body(PersonEdit, await read_json(request, limit=16 * 1024))
    fields = body.model_dump(exclude_none=True)
    if not fields:
        raise ApiError(400, "bad_request", "say what to change: name, aliases, relation, phones, emails or dates")
    if "dates" in fields:
        fields["dates"] = [KeyDate(**d) for d in fields["dates"]]
    cmd = PeopleCommand(op="edit", person_id=person_id, request_id=idempotency_key(request), **fields)
    reply = await ask_people(bus, cmd)
    if reply.person is None:
        raise ApiError(502, "failed", "the memory service answered without the person")
    return {"person": reply.person.model_dump(mode="json"), "event_id": reply.event_id}


@router.delete("/people/{person_id}")
async def forget_person(person_id: str, request: Request, bus: BusDep) -> dict[str, Any]:
    """Forget them (``person.forgotten``): their facts unlinked and forgotten, never retrieved or
    shown to a model again; the ledger keeps the history. 404 unknown or already forgotten."""
    check_id(person_id)
    cmd = PeopleCommand(op="forget", person_id=person_id, request_id=idempotency_key(request),
                        reason="forgotten by the owner")
    reply = await ask_people(bus, cmd)
    return {"forgotten": person_id, "event_id": reply.event_id}


@router.get("/commitments")
async def list_commitments(bus: BusDep, state: str | None = None) -> dict[str, Any]:
    """Promises by the owner and by the assistant: ``state`` open (default), kept, dropped or all."""
    chosen = state or "open"
    if chosen not in STATES:
        raise ApiError(400, "bad_state", f"state must be one of {', '.join(STATES)}")
    reply = await ask_commitments(bus, CommitmentsCommand(op="list", state=chosen))
    return {"commitments": [c.model_dump(mode="json") for c in reply.commitments]}
