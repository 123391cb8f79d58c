"""The owner's (and the agent's) control of people and commitments: list, get, edit, forget, and
a commitment kept or dropped. As for facts (``commands.py``): a change is an event through the
ledger, answered once the index has applied it; an id derived from ``request_id`` makes a
retried command write nothing twice."""

from datetime import datetime
from zoneinfo import ZoneInfo

from delegate.contracts.events import CommitmentDropped, CommitmentKept, Payload, PersonForgotten, PersonUpdated
from delegate.contracts.ids import utcnow
from delegate.contracts.people import (
    Commitment,
    CommitmentsCommand,
    CommitmentsReply,
    PeopleCommand,
    PeopleReply,
    PersonDetail,
)
from delegate.runtime.bus import DomainError

from . import people_index
from .commands import APPLY_WAIT_S, FactCommands
from .dedup import similarity
from .index import MemoryIndex
from .people import date_ok, email_key, name_key, phone_key

# Words of the agent's that pick an open commitment without its id: at least this similar.
MATCH_FLOOR = 0.2


class PeopleCommands:
    def __init__(self, facts: FactCommands, index: MemoryIndex, zone: ZoneInfo) -> None:
        self.facts = facts  # its publish-and-wait-until-applied
        self.index = index
        self.zone = zone

    # ---- people ------------------------------------------------------------------------------

    async def people(self, cmd: PeopleCommand) -> PeopleReply:
        now = utcnow()
        db = self.index.reader()
        if cmd.op == "list":
            return PeopleReply(people=people_index.list_people(db, now=now, zone=self.zone, limit=cmd.limit))
        if cmd.op == "match":
            found = people_index.match(db, phones=cmd.phones or [], emails=cmd.emails or [])
            return PeopleReply(person=self._person(found, now) if found else None)
        person = self._person(cmd.person_id, now)
        if cmd.op == "get":
            return PeopleReply(person=person)
        if cmd.op == "forget":
            payload: Payload = PersonForgotten(person_id=person.id, reason=cmd.reason)
            event_id = await self._write(payload, cmd.request_id, None, None)
            return PeopleReply(event_id=event_id)
        payload = self._edit(cmd, person)
        event_id = await self._write(payload, cmd.request_id, None, None)
        return PeopleReply(person=self._person(person.id, now), event_id=event_id)

    def _person(self, person_id: str | None, now: datetime) -> PersonDetail:
        if not person_id:
            raise DomainError("bad_request", "this command needs person_id")
        person = people_index.person_detail(self.index.reader(), person_id, now=now, zone=self.zone)
        if person is None:
            raise DomainError("not_found", f"no person {person_id}")
        return person

    @staticmethod
    def _edit(cmd: PeopleCommand, person: PersonDetail) -> PersonUpdated:
        """The owner's edit: what the command names replaces the person's own; the rest stays."""
        if cmd.name is not None and not name_key(cmd.name):
            raise DomainError("bad_request", "name: say the person's name")
        for phone in cmd.phones or []:
            if not phone_key(phone):
                raise DomainError("bad_request", f"phones: {phone[:40]!r} is not a phone number")
        for d in cmd.dates or []:
            if not date_ok(d.date):
                raise DomainError("bad_request", f"dates: {d.date!r} is not MM-DD or YYYY-MM-DD")
        for email in cmd.emails or []:
            if not email_key(email):
                raise DomainError("bad_request", f"emails: {email[:80]!r} is not an email address")
        return PersonUpdated(
            person_id=person.id, name=cmd.name or person.name,
            aliases=cmd.aliases if cmd.aliases is not None else person.aliases,
            relation=cmd.relation if cmd.relation is not None else person.relation,
            phones=cmd.phones if cmd.phones is not None else person.phones,
            emails=[e.strip().lower() for e in cmd.emails] if cmd.emails is not None else person.emails,
            dates=[{"label": d.label, "date": d.date} for d in (cmd.dates if cmd.dates is not None else person.dates)],
            replace=True,
        )

    # ---- commitments -------------------------------------------------------------------------

    async def commitments(self, cmd: CommitmentsCommand) -> CommitmentsReply:
        db = self.index.reader()
        if cmd.op == "list":
            return CommitmentsReply(commitments=people_index.list_commitments(db, state=cmd.state, limit=cmd.limit))
        found = self._commitment(cmd)
        if cmd.op == "get":
            return CommitmentsReply(commitment=found)
        if cmd.new_state is None:
            raise DomainError("bad_request", "update needs new_state: kept or dropped")
        if found.state != "open":
            # said twice ("done", "yes, done"): the first close stands, nothing is written again
            return CommitmentsReply(commitment=found)
        model = CommitmentKept if cmd.new_state == "kept" else CommitmentDropped
        payload = model(commitment_id=found.id, reason=cmd.reason, event_ids=cmd.event_ids)
        event_id = await self._write(payload, cmd.request_id, cmd.conversation_id, cmd.span_id)
        return CommitmentsReply(commitment=people_index.commitment(self.index.reader(), found.id), event_id=event_id)

    def _commitment(self, cmd: CommitmentsCommand) -> Commitment:
        db = self.index.reader()
        if cmd.commitment_id:
            found = people_index.commitment(db, cmd.commitment_id)
            if found is None:
                raise DomainError("not_found", f"no commitment {cmd.commitment_id}")
            return found
        if not cmd.what:
            raise DomainError("bad_request", "name the commitment: commitment_id, or what was promised")
        words = cmd.what
        open_ones = people_index.list_commitments(db, state="open", limit=1000)
        scored = sorted(((similarity(words, c.what), c) for c in open_ones), key=lambda sc: -sc[0])
        if not scored or scored[0][0] < MATCH_FLOOR:
            # said again after it was closed ("done" twice, a retried call): the closed one answers
            closed = people_index.list_commitments(db, state=cmd.new_state or "all", limit=1000)
            best = max(closed, key=lambda c: similarity(words, c.what), default=None)
            if best is not None and best.state != "open" and similarity(words, best.what) >= MATCH_FLOOR:
                return best
            raise DomainError("not_found", f"no open commitment like {words[:200]!r}")
        if len(scored) > 1 and scored[1][0] == scored[0][0]:
            raise DomainError("conflict", "several open commitments fit those words; give commitment_id")
        return scored[0][1]

    async def _write(
        self, payload: Payload, request_id: str | None, conversation_id: str | None, span_id: str | None
    ) -> str:
        event_id = await self.facts.publish(payload, request_id, conversation_id, span_id)
        if not await self.facts.wait_applied(event_id, APPLY_WAIT_S):
            raise DomainError("timeout", f"change {event_id} was sent but is not in the index yet; try again")
        return event_id
