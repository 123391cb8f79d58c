"""What one write decides and updates besides storing its events.

The fences: each fenced row judged against the highest token its singleton committed
(``judge_fences``), and the refusals that stand (``refusals``). And the rows a commit touches
beside ``events``: conversations and spans (``summarize``), leadership terms
(``term_changes``) and a run's newest picture (``artifact_changes``). Both backends apply
these in the write's own transaction (``statements.py`` spells the SQL once).
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from delegate.contracts.events import (
    ConversationEnded,
    ConversationOpened,
    Fence,
    SpanClosed,
    SpanOpened,
    TermEnded,
    TermStarted,
    ThoughtflowArtifact,
)

from .base import Row, StoredEvent

FENCED = "fenced"  # how a refusal for an older term's token begins


@dataclass
class FenceVerdict:
    kept: list[int]  # indexes of the rows to store
    stale: dict[int, str]  # index -> why: a token older than its singleton's mark
    raised: dict[str, int]  # singleton -> its new mark, where this batch raised it


def judge_fences(rows: Sequence[Row], fences: Sequence[Fence | None], marks: dict[str, int]) -> FenceVerdict:
    """Check each fenced row, in delivery order, against the highest token seen for its singleton.

    A token below the mark belongs to a deposed leader (paused, partitioned, then woken up)
    and is refused; an equal one is the current term; a higher one is a new term and raises
    the mark for every row after it, in this batch and in every later transaction. Whether
    a fence may come from its producer at all was decided before (``writer.rows_of``).
    """
    marks = dict(marks)
    verdict = FenceVerdict([], {}, {})
    for i, (row, fence) in enumerate(zip(rows, fences, strict=True)):
        if fence is not None:
            mark = marks.get(fence.singleton, 0)
            if fence.token < mark:
                verdict.stale[i] = (
                    f"{FENCED}: term token {fence.token} is older than {mark}"
                    f" ({fence.singleton} event {row[0]} from a deposed leader)"
                )
                continue
            if fence.token > mark:
                marks[fence.singleton] = verdict.raised[fence.singleton] = fence.token
        verdict.kept.append(i)
    return verdict


def refusals(rows: Sequence[Row], verdict: FenceVerdict, stored_ids: set[str]) -> list[tuple[int, str]]:
    """The stale rows to refuse: those whose event is neither stored already (``stored_ids``) nor
    kept earlier in this very batch; either way it is a redelivery of what its term wrote while it led."""
    there = stored_ids | {rows[i][0] for i in verdict.kept}
    return [(i, why) for i, why in verdict.stale.items() if rows[i][0] not in there]


@dataclass
class ConversationTouch:
    id: str
    last_event_at: datetime
    last_seq: int
    opened_at: datetime | None = None
    ended_at: datetime | None = None


@dataclass
class SpanChange:
    id: str
    conversation_id: str | None = None
    type: str | None = None
    opened_at: datetime | None = None
    opened_seq: int | None = None
    closed_at: datetime | None = None


@dataclass
class Summary:
    conversations: list[ConversationTouch] = field(default_factory=list)
    spans: list[SpanChange] = field(default_factory=list)


# Stored rows carry their kind as text: compared with the models' kinds (plain string compares
# on the writer's path, which sees every event; only the rare span and term events are parsed).
OPENED, ENDED = ConversationOpened.KIND, ConversationEnded.KIND
SPAN_KINDS = frozenset({SpanOpened.KIND, SpanClosed.KIND})


def summarize(committed: Sequence[StoredEvent]) -> Summary:
    """What newly stored events change in the conversations and spans tables, one row each."""
    convs: dict[str, ConversationTouch] = {}
    spans: dict[str, SpanChange] = {}
    for event in committed:  # every event of every batch: plain comparisons, not max()
        conversation_id, kind = event.conversation_id, event.kind
        if conversation_id:
            touch = convs.get(conversation_id)
            if touch is None:
                touch = convs[conversation_id] = ConversationTouch(conversation_id, event.ts, event.seq)
            else:
                if event.ts > touch.last_event_at:
                    touch.last_event_at = event.ts
                if event.seq > touch.last_seq:
                    touch.last_seq = event.seq
            if kind == OPENED and touch.opened_at is None:
                touch.opened_at = event.ts
            elif kind == ENDED and touch.ended_at is None:
                touch.ended_at = event.ts
        if event.span_id and kind in SPAN_KINDS:
            change = spans.setdefault(event.span_id, SpanChange(event.span_id))
            change.conversation_id = change.conversation_id or event.conversation_id
            if kind == SpanOpened.KIND and change.opened_seq is None:
                change.type = SpanOpened.model_validate_json(event.payload_json).type
                change.opened_at = event.ts
                change.opened_seq = event.seq
            elif kind == SpanClosed.KIND and change.closed_at is None:
                change.closed_at = event.ts
    return Summary(list(convs.values()), list(spans.values()))


TERM_KINDS = frozenset({TermStarted.KIND, TermEnded.KIND})


@dataclass
class TermChange:
    """What one batch changes in a ``terms`` row. Applied with COALESCE on every column:
    a column once set is never overwritten, so the first start and the first end win."""

    id: str
    type: str | None = None
    holder: str | None = None
    started_at: datetime | None = None
    started_seq: int | None = None
    supersedes: str | None = None
    ended_at: datetime | None = None
    end_reason: str | None = None
    # Closed by a successor's ``supersedes`` only: close the row if it exists and is open, never
    # create one (a term id nobody started is not a term worth recording).
    close_only: bool = False


def term_changes(committed: Sequence[StoredEvent]) -> list[TermChange]:
    """What newly stored term.started / term.ended events change in ``terms``, one per id.

    ``committed`` holds only events this transaction stored (redeliveries were dropped by id
    before), in seq order, so within a batch the first start and the first end win, as the
    upsert makes them win across batches.
    """
    changes: dict[str, TermChange] = {}
    for event in committed:
        if event.kind not in TERM_KINDS:
            continue
        term = (TermEnded if event.kind == TermEnded.KIND else TermStarted).model_validate_json(event.payload_json)
        change = changes.get(term.term_id)
        if change is None:
            change = changes[term.term_id] = TermChange(term.term_id)
        change.close_only = False
        if isinstance(term, TermEnded):
            if change.ended_at is None:
                change.ended_at, change.end_reason = event.ts, term.reason
            continue
        if change.started_seq is None:
            change.type, change.holder = term.type, term.holder
            change.started_at, change.started_seq = event.ts, event.seq
            change.supersedes = term.supersedes
        previous_id = term.supersedes
        if previous_id and previous_id != term.term_id:
            previous = changes.get(previous_id)
            if previous is None:
                previous = changes[previous_id] = TermChange(previous_id, close_only=True)
            if previous.ended_at is None:
                previous.ended_at, previous.end_reason = event.ts, "superseded"
    return list(changes.values())


ARTIFACT_KIND = ThoughtflowArtifact.KIND


@dataclass
class ArtifactChange:
    """One ``thoughtflow_artifacts`` row: a run's newest picture, from its thoughtflow.artifact event.

    Applied as an upsert that replaces the row only when this picture covers as much of the run
    as the stored one or more (``through_seq``): a drawing committed late never hides a newer one.
    """

    run_id: str
    run_type: str
    span_id: str | None
    d2_path: str
    svg_path: str | None
    bytes: int
    through_seq: int
    error: str | None
    created_at: datetime
    event_id: str
    seq: int


def artifact_changes(committed: Sequence[StoredEvent]) -> list[ArtifactChange]:
    """What newly stored thoughtflow.artifact events change in ``thoughtflow_artifacts``, one per run
    (in seq order, so on equal ``through_seq`` the later commit wins, as the upsert makes it win
    across batches)."""
    newest: dict[str, ArtifactChange] = {}
    for event in committed:
        if event.kind != ARTIFACT_KIND:
            continue
        # Validated on the way in; the model fills in the defaults a producer left unsent.
        a = ThoughtflowArtifact.model_validate_json(event.payload_json)
        change = ArtifactChange(
            a.run_id, a.run_type, a.span_id, a.d2_path, a.svg_path, a.bytes, a.through_seq, a.error,
            event.ts, event.id, event.seq,
        )
        kept = newest.get(a.run_id)
        if kept is None or change.through_seq >= kept.through_seq:
            newest[a.run_id] = change
    return list(newest.values())
