"""The inner plane's own durable progress: one small JSON file, replaced atomically.

Everything in it is derived from the ledger's committed events (processed in seq
order up to ``last_seq``) plus what this service has already done about them, so
a restart resumes exactly where the last written state left off. The ledger stays
the only writer of the main database.
"""

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

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


class PendingSignal(_Model):
    id: str
    seq: int
    source: str
    type: str
    priority: int
    data: dict[str, object] = Field(default_factory=dict)
    ts: datetime


class ActivationBatch(_Model):
    activation_id: str
    signal_ids: list[str]
    signals: list[dict[str, object]]
    sent_at: datetime


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
    signals: list[PendingSignal] = Field(default_factory=list)  # waiting for an activation
    batch: ActivationBatch | None = None  # the activation in flight

    def open_span_of(self, conversation_id: str | None) -> str | None:
        for span in self.spans.values():
            if span.conversation_id == conversation_id:
                return span.span_id
        return None


class StateFile:
    """Load once at start; ``save`` after every change (a few hundred bytes to a few KB)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def load(self) -> InnerState:
        try:
            return InnerState.model_validate_json(self.path.read_bytes())
        except FileNotFoundError:
            return InnerState()
        except (ValidationError, ValueError) as exc:
            # Unreadable progress is rebuilt from the ledger; the dedup rules make that safe.
            log.error("state file %s is unreadable (%s); rebuilding from the ledger", self.path, exc)
            return InnerState()

    def save(self, state: InnerState) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        data = state.model_dump_json().encode()
        with open(tmp, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.path)
        _fsync_dir(self.path.parent)


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
