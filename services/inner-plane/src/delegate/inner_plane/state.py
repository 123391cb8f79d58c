"""The inner plane's own durable progress: one small JSON file, replaced atomically.

Everything in it is derived from the ledger's committed events (processed in seq
order up to ``last_seq``) plus what this service has already done about them, so
a restart resumes exactly where the last written state left off. The ledger stays
the only writer of the main database.
"""

import asyncio
import json
import logging
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from delegate.contracts.reminders import Reminder
from delegate.runtime.spend import SpendBook

log = logging.getLogger(__name__)


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore")


class OpenSpan(_Model):
    """A span.opened without span.closed, and its newest activity."""

    span_id: str
    conversation_id: str | None = None
    type: str = "interaction"
    last_seq: int
    last_ts: datetime
    fired_seq: int | None = None  # the last_seq an idle check was already sent for


class CapsuleRequest(_Model):
    reason: str
    trigger_seq: int  # the event that asked; a capsule through at least this seq satisfies it
    conversation_id: str  # where the refreshed capsule is recorded


class Capsule(_Model):
    """The newest capsule. One relationship, one capsule: it spans technical conversations."""

    text: str
    through_seq: int
    event_id: str


class CheckpointRef(_Model):
    id: str
    seq: int
    conversation_id: str | None
    span_id: str | None
    after_seq: int
    through_seq: int


class SignalHold(_Model):
    """The broker's latest ``hold`` of a signal: why, and until when (None: until the owner's turn ends)."""

    reason: str
    until: datetime | None = None


class PendingSignal(_Model):
    """A committed signal without a final decision (act, coalesce or drop) yet."""

    id: str
    seq: int
    ts: datetime  # the signal's own time (the dedup window and coalescing read it)
    kind: str
    source: str
    urgency: str = "normal"
    dedup_key: str | None = None
    expires_at: datetime | None = None
    signal: dict[str, Any] = Field(default_factory=dict)  # the signal as raised (its JSON)
    duplicate_of: str | None = None  # the first signal with its dedup key inside the window
    decisions: int = 0  # decisions committed about it so far (the n in their derived ids)
    last_decision: str | None = None  # its newest decision's event id (applied once)
    hold: SignalHold | None = None

    @property
    def urgent(self) -> bool:
        return self.urgency == "urgent"


class DedupEntry(_Model):
    signal_id: str
    ts: datetime


class ActivationBatch(_Model):
    activation_id: str
    signal_ids: list[str]
    signals: list[dict[str, Any]]
    sent_at: datetime  # the act decision's time; the outcome timeout counts from it
    urgent: bool = False
    reply_via: str | None = None


class BrokerState(_Model):
    """The attention broker's view, derived only from committed events (signals, decisions, turns)."""

    pending: dict[str, PendingSignal] = Field(default_factory=dict)  # in seq order
    dedup: dict[str, DedupEntry] = Field(default_factory=dict)  # dedup key -> the first signal
    wakes: list[datetime] = Field(default_factory=list)  # proactive (non-urgent) acts, newest last
    batch: ActivationBatch | None = None  # the activation in flight
    # The owner mid-turn: user messages (id -> ts) without their answer, voice calls open (by
    # their wire session_id). A state file written before the rename says "open_sessions".
    open_turns: dict[str, datetime] = Field(default_factory=dict)
    open_calls: dict[str, datetime] = Field(
        default_factory=dict, validation_alias=AliasChoices("open_calls", "open_sessions")
    )
    # Spend against BUDGET_* (committed model.usage events); background work waits at the line.
    spend: SpendBook = Field(default_factory=SpendBook)


class DueCommitment(_Model):
    """An open commitment with a due time (issue #30), until its commitment.due is committed."""

    id: str
    by: str
    what: str
    to: str | None = None
    due: datetime
    due_text: str | None = None
    event_ids: list[str] = Field(default_factory=list)


class DateOffer(_Model):
    """A person's key date learned, whose person.date signal is not committed yet."""

    signal_id: str
    person_id: str
    name: str
    label: str
    date: str


class InnerState(_Model):
    last_seq: int = 0
    last_event_id: str | None = None
    current_conversation_id: str | None = None
    spans: dict[str, OpenSpan] = Field(default_factory=dict)
    # Per conversation (each has its own Responses chain): is input usage at/above the capsule line?
    usage_above_line: dict[str, bool] = Field(default_factory=dict)
    capsule: Capsule | None = None
    capsule_request: CapsuleRequest | None = None  # kept until a capsule accounts for it
    checkpoints: list[CheckpointRef] = Field(default_factory=list)  # waiting for memory extraction
    broker: BrokerState = Field(default_factory=BrokerState)
    # Every reminder by id, as its committed reminder.* / reminder.due events say (reminders.store).
    reminders: dict[str, Reminder] = Field(default_factory=dict)
    # Budget notices the owner got ("<scope>:<period>", from budget.notice events), and the
    # channel the owner last wrote on (where a notice goes).
    budget_notices: list[str] = Field(default_factory=list)
    owner_channel: str | None = None
    # People and commitments (issue #30, commitments.py): what falls due, and key dates to offer.
    commitments: dict[str, DueCommitment] = Field(default_factory=dict)
    date_offers: dict[str, DateOffer] = Field(default_factory=dict)
    person_names: dict[str, str] = Field(default_factory=dict)


class StateFile:
    """Load once at start; ``await save(state)`` after every change (a few hundred bytes to a few KB).

    The write and its fsyncs run in a worker thread: a slow disk holds up only the caller
    that waits for durability, never the event loop (live intake, signals, pings). Saves
    asked for while a write is under way are coalesced into the one write after it.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._saving = asyncio.Lock()  # one snapshot in flight at a time
        self._write_lock = threading.Lock()  # one thread touching the files at a time
        self._requested = 0  # saves asked for (event loop side)
        self._durable = 0  # the newest save on disk (written by the worker thread under _write_lock)

    def load(self) -> InnerState:
        try:
            return InnerState.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return InnerState()
        except (ValidationError, ValueError) as exc:
            # Unreadable progress is rebuilt from the ledger; the dedup rules make that safe.
            log.error("state file %s is unreadable (%s); rebuilding from the ledger", self.path, exc)
            return InnerState()

    async def save(self, state: InnerState) -> None:
        """Return once a snapshot of ``state`` taken after this call is on disk."""
        self._requested += 1
        ticket = self._requested
        async with self._saving:
            if self._durable >= ticket:
                return  # a write that began after our change already covered it
            # The snapshot is taken here, on the loop, so it is consistent; every change whose
            # save() came before this point is in it.
            generation = self._requested
            data = state.model_dump_json().encode()
            await asyncio.to_thread(self.write, data, generation)

    def write(self, data: bytes, generation: int) -> None:
        """The atomic replace (tmp + fsync + rename + dir fsync), in a worker thread."""
        with self._write_lock:
            if generation <= self._durable:
                # A save cancelled mid-write let a newer one start; never put older state back.
                return
            # Owner only, like the ledger's files: the capsule is a summary of the person's life.
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.fchmod(fd, 0o600)  # a tmp file left behind by a crash keeps its old mode otherwise
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
            _fsync_dir(self.path.parent)
            self._durable = generation


def _fsync_dir(path: Path) -> None:
    # The rename is durable only once the directory entry is.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def dump(state: InnerState) -> str:
    """For logs and tests."""
    return json.dumps(state.model_dump(mode="json"), indent=2)
