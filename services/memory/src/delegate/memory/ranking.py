"""Hybrid search over the index: BM25 candidates from FTS5 (a bounded set per kind), re-ranked
in Python with recency, the question's time windows and the speakers it names.

Bounded work per query whatever the index holds: at most ``CANDIDATES`` rows per kind come out
of FTS5 (its own top by bm25) plus ``WINDOW_CANDIDATES`` inside each named time window; the
rest is arithmetic on those. Retired and forgotten facts are not in ``facts_fts`` at all, so
they can never be results.

With embeddings on (``dense``, delegate.memory.vectors) each kind also gets its nearest rows by
cosine, read back through the same filters, and every candidate's cosine joins its score like
BM25 does: a paraphrase with no word in common is found, and words still count.
"""

import json
import math
import sqlite3
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from delegate.contracts.memory import MemoryResult, MemorySearchReply, MemorySearchRequest

from .index import MemoryIndex
from .query import Coverage, content_terms, fts_query, quoted, words
from .reads import snapshot
from .records import from_epoch
from .timeexpr import Window, windows

if TYPE_CHECKING:  # numpy and the model are an optional extra: imported only when they are on
    from .vectors import DenseVectors

CANDIDATES = 200
FEW_CANDIDATES = 50  # facts and episodes: distilled, each one worth more, far fewer needed
# BM25 costs per matching row: the message candidates come from the query's rarer terms, as
# many as keep the rows to score under this; a term in nearly every message says little anyway.
POSTINGS_BUDGET = 8_000
WINDOW_CANDIDATES = 100
MAX_ADAPTATIONS = 50

# bm25 column weights: the message itself, its speaker, the turn before it in its conversation
MESSAGE_WEIGHTS = (1.0, 0.5, 0.6)
# Text relevance is mostly BM25 (normalised per kind: each FTS table has its own statistics, so
# raw scores do not compare across kinds), partly the share of the query words present.
W_BM25 = 0.7
W_COVER = 0.3
W_TIME = 0.6  # inside a window the question names
W_SPEAKER = 0.3  # said by someone the question names
W_RECENT = 0.06  # a gentle tie-break towards what is recent
RECENT_HALF_LIFE_DAYS = 90.0
KIND_PRIOR = {"fact": 0.12, "episode": 0.05, "message": 0.0}
# Dense: the nearest rows per kind by cosine, and the cosine's weight (normalised per kind like
# BM25; below the floor MiniLM's cosines are noise, unrelated texts still score about 0.1-0.2).
DENSE_CANDIDATES = {"fact": 20, "episode": 20, "message": 50}
W_DENSE = 0.7
DENSE_FLOOR = 0.2


@dataclass
class Candidate:
    kind: str
    id: str
    text: str
    ts: float
    bm25: float = 0.0  # higher is better (FTS5's bm25 negated)
    rowid: int = 0  # in its kind's table
    dense: float = 0.0  # cosine to the query, when embeddings are on
    event_ids: list[str] = field(default_factory=list)
    refs: list[str] = field(default_factory=list)
    type: str | None = None
    speaker: str | None = None
    channel: str | None = None
    conversation_id: str | None = None
    suppressed: bool = False
    score: float = 0.0
    why: list[str] = field(default_factory=list)


def tokens_of(text: str) -> int:
    """The budget's estimate: about four characters a token."""
    return max(1, math.ceil(len(text) / 4))


def _between(w: Window) -> tuple[float, float]:
    return w.start.timestamp(), w.end.timestamp()


@dataclass(frozen=True)
class Plan:
    """How the message candidates are read: ``match`` by bm25, or the newest of ``newest``."""

    match: str | None
    newest: bool = False  # every term is common: the newest matches, scored, not all of them


def plan_messages(db: sqlite3.Connection, terms: list[str]) -> Plan:
    if not terms:
        return Plan(None)
    db.execute("DELETE FROM temp.query_words")
    db.executemany("INSERT INTO temp.query_words (rowid, word) VALUES (?, ?)", list(enumerate(terms)))
    stems = dict(db.execute("SELECT doc, term FROM temp.query_terms").fetchall())
    if not stems:
        return Plan(None)
    marks = ",".join("?" * len(set(stems.values())))
    df = dict(db.execute(f"SELECT term, doc FROM messages_vocab WHERE term IN ({marks})", list(set(stems.values()))))
    known = sorted((df[s], terms[i]) for i, s in stems.items() if df.get(s))
    if not known:
        return Plan(None)
    kept, total = [], 0
    for count, term in known:
        if total + count > POSTINGS_BUDGET:
            break
        kept.append(term)
        total += count
    if kept:
        return Plan(" OR ".join(quoted(t) for t in kept))
    if len(known) > 1:  # only common words: those messages that have the rarest ones together
        return Plan(" AND ".join(quoted(t) for _, t in known[:3]))
    return Plan(quoted(known[0][1]), newest=True)


def _messages(
    db: sqlite3.Connection, plan: Plan, wins: list[Window], hide_suppressed: bool, skip: Collection[str] = (),
) -> list[Candidate]:
    """``skip``: event ids left out before they become candidates (what the model carries verbatim)."""
    found: dict[int, float] = {}
    weights = ", ".join(str(w) for w in MESSAGE_WEIGHTS)
    match = plan.match
    # Left out inside each query, before its LIMIT: in a long chat the carried turns are most of
    # what matches, and each was scored, read and dropped after it (most of the search's time,
    # issue #27), crowding out older matches the model does not have.
    unless = ""
    skipped: tuple[str, ...] = ()
    if skip:
        unless = " AND {0}.rowid NOT IN (SELECT rowid FROM messages WHERE event_id IN (SELECT value FROM json_each(?)))"
        skipped = (json.dumps(list(skip)),)
    if match:
        order = "rowid DESC" if plan.newest else "s"
        for rowid, score in db.execute(
            f"SELECT rowid, bm25(messages_fts, {weights}) AS s FROM messages_fts WHERE messages_fts MATCH ?"
            f"{unless.format('messages_fts')} ORDER BY {order} LIMIT ?", (match, *skipped, CANDIDATES),
        ):
            found[rowid] = -score
    for w in wins:
        lo, hi = _between(w)
        if match:
            rows = db.execute(
                f"SELECT f.rowid, bm25(messages_fts, {weights}) AS s FROM messages_fts f"
                " JOIN messages m ON m.rowid = f.rowid WHERE messages_fts MATCH ? AND m.ts >= ? AND m.ts < ?"
                f"{unless.format('m')} ORDER BY s LIMIT ?", (match, lo, hi, *skipped, WINDOW_CANDIDATES),
            )
        else:  # only a time: the newest of that window
            rows = db.execute(
                f"SELECT rowid, 0.0 FROM messages WHERE ts >= ? AND ts < ?{unless.format('messages')}"
                " ORDER BY ts DESC LIMIT ?", (lo, hi, *skipped, WINDOW_CANDIDATES),
            )
        for rowid, score in rows:
            found.setdefault(rowid, -score)
    if not found:
        return []
    marks = ",".join("?" * len(found))
    rows = db.execute(f"SELECT * FROM messages WHERE rowid IN ({marks})", list(found))
    return [_message_candidate(r, found[r["rowid"]]) for r in rows if not (hide_suppressed and r["suppressed"])]


def _message_candidate(r: sqlite3.Row, score: float) -> Candidate:
    return Candidate(
        kind="message", id=r["event_id"], text=r["text"], ts=r["ts"], bm25=score, rowid=r["rowid"],
        event_ids=[r["event_id"]], refs=[r["ref"]] if r["ref"] else [], speaker=r["speaker"],
        channel=r["channel"], conversation_id=r["conversation_id"], suppressed=bool(r["suppressed"]),
    )


def _facts(db: sqlite3.Connection, match: str | None) -> list[Candidate]:
    if not match:
        return []
    rows = db.execute(
        "SELECT f.*, bm25(facts_fts) AS s FROM facts_fts JOIN facts f ON f.rowid = facts_fts.rowid"
        " WHERE facts_fts MATCH ? AND f.status = 'active' ORDER BY s LIMIT ?", (match, FEW_CANDIDATES),
    )
    return [_fact_candidate(r, -r["s"]) for r in rows]


def _fact_candidate(r: sqlite3.Row, score: float) -> Candidate:
    return Candidate(
        kind="fact", id=r["id"], text=r["text"], ts=r["valid_at"], bm25=score, rowid=r["rowid"],
        event_ids=json.loads(r["event_ids"]),
        refs=json.loads(r["refs"]), type=r["type"],
    )


def _episodes(db: sqlite3.Connection, match: str | None, wins: list[Window]) -> list[Candidate]:
    found: dict[int, float] = {}
    if match:
        for rowid, score in db.execute(
            "SELECT rowid, bm25(episodes_fts) AS s FROM episodes_fts WHERE episodes_fts MATCH ? ORDER BY s LIMIT ?",
            (match, FEW_CANDIDATES),
        ):
            found[rowid] = -score
    elif wins:
        for w in wins:
            lo, hi = _between(w)
            for (rowid,) in db.execute(
                "SELECT rowid FROM episodes WHERE ts >= ? AND ts < ? ORDER BY ts DESC LIMIT ?",
                (lo, hi, WINDOW_CANDIDATES),
            ):
                found.setdefault(rowid, 0.0)
    if not found:
        return []
    marks = ",".join("?" * len(found))
    return [
        _episode_candidate(r, found[r["rowid"]])
        for r in db.execute(f"SELECT * FROM episodes WHERE rowid IN ({marks})", list(found))
    ]


def _episode_candidate(r: sqlite3.Row, score: float) -> Candidate:
    return Candidate(
        kind="episode", id=r["event_id"], text=r["text"], ts=r["ts"], bm25=score, rowid=r["rowid"],
        event_ids=json.loads(r["turn_ids"]), conversation_id=r["conversation_id"],
    )


# The filters full text applies, for rows the dense path finds: a retired or forgotten fact, or
# (for a model) a suppressed message, is never a result this way either.
DENSE_ROWS = {
    "fact": ("SELECT * FROM facts WHERE status = 'active' AND rowid IN ({})", _fact_candidate),
    "episode": ("SELECT * FROM episodes WHERE rowid IN ({})", _episode_candidate),
    "message": ("SELECT * FROM messages WHERE rowid IN ({})", _message_candidate),
}


def _dense(db: sqlite3.Connection, dense: "DenseVectors", query: str, kinds: Collection[str], cands: list[Candidate],
           hide_suppressed: bool) -> None:
    """Add each kind's nearest rows the full text missed, and give every candidate its cosine."""
    q = dense.query(query)
    have = {(c.kind, c.rowid) for c in cands}
    for kind in sorted(kinds):
        top = dense.top(kind, q, DENSE_CANDIDATES[kind])
        rows = [row for row, sim in top if sim > DENSE_FLOOR and (kind, row) not in have]
        if not rows:
            continue
        sql, make = DENSE_ROWS[kind]
        for r in db.execute(sql.format(",".join("?" * len(rows))), rows):
            if not (kind == "message" and hide_suppressed and r["suppressed"]):
                cands.append(make(r, 0.0))
    for kind in kinds:
        sims = dense.similarity(kind, q, [c.rowid for c in cands if c.kind == kind])
        for c in cands:
            if c.kind == kind:
                c.dense = sims.get(c.rowid, 0.0)


def adaptations(db: sqlite3.Connection) -> list[Candidate]:
    rows = db.execute(
        "SELECT * FROM facts WHERE status = 'active' AND type = 'adaptation' ORDER BY valid_at DESC LIMIT ?",
        (MAX_ADAPTATIONS,),
    )
    out = []
    for r in rows:
        c = _fact_candidate(r, 0.0)
        c.why = ["adaptation"]
        out.append(c)
    return out


def _named_speakers(index: MemoryIndex, query: str) -> set[str]:
    table = index.speakers()
    return {name for w in words(query) for name in table.get(w, [])}


def _score(cands: list[Candidate], cover: Coverage, wins: list[Window], speakers: set[str], now: float) -> None:
    best: dict[str, float] = {}
    best_dense: dict[str, float] = {}
    for c in cands:
        best[c.kind] = max(best.get(c.kind, 0.0), c.bm25)
        best_dense[c.kind] = max(best_dense.get(c.kind, 0.0), c.dense)
    for c in cands:
        why = c.why
        score = KIND_PRIOR[c.kind]
        if c.bm25 > 0:
            score += W_BM25 * c.bm25 / (best[c.kind] or 1.0) + W_COVER * cover(c.text)
            why.append("text")
        if c.dense > DENSE_FLOOR:
            score += W_DENSE * (c.dense - DENSE_FLOOR) / (best_dense[c.kind] - DENSE_FLOOR)
            why.append("meaning")
        hits = [w.label for w in wins if w.start.timestamp() <= c.ts < w.end.timestamp()]
        if hits:
            score += W_TIME
            why.extend(hits)
        if c.speaker and c.speaker in speakers:
            score += W_SPEAKER
            why.append(f"speaker:{c.speaker}")
        age_days = max(0.0, (now - c.ts) / 86400)
        recency = 0.5 ** (age_days / RECENT_HALF_LIFE_DAYS)
        score += W_RECENT * recency
        if recency > 0.5:
            why.append("recent")
        c.score = round(score, 6)


def _result(c: Candidate) -> MemoryResult:
    return MemoryResult(
        kind=c.kind,
        id=c.id, text=c.text, score=c.score, ts=from_epoch(c.ts), event_ids=c.event_ids, refs=c.refs,
        type=c.type,
        speaker=c.speaker, channel=c.channel, conversation_id=c.conversation_id, why=c.why,
    )


def search(
    index: MemoryIndex, req: MemorySearchRequest, now: datetime, default_budget: int,
    dense: "DenseVectors | None" = None,
) -> MemorySearchReply:
    """``dense``: the embedded rows, when embeddings are on and loaded; None is full text only."""
    with snapshot(index.reader()):  # every candidate from the same moment of the index
        return _search(index, req, now, default_budget, dense)


def _search(
    index: MemoryIndex, req: MemorySearchRequest, now: datetime, default_budget: int, dense: "DenseVectors | None",
) -> MemorySearchReply:
    started = time.perf_counter()
    db = index.reader()
    through = index.last_seq
    for_model = req.purpose != "owner"
    kinds = set(req.kinds or ("fact", "episode", "message"))
    wins = windows(req.query, now)
    terms = content_terms(req.query)
    match = fts_query(req.query)
    # The newest turns a chat carries match its next question best: left out as rows, before a
    # candidate is built for each (most of a search's time in a long chat, issue #27).
    excluded = set(req.exclude_event_ids) if for_model else set()
    cands: list[Candidate] = []
    if "fact" in kinds:
        cands += _facts(db, match)
    if "episode" in kinds:
        cands += _episodes(db, match, wins)
    if "message" in kinds:
        cands += _messages(db, plan_messages(db, terms), wins, hide_suppressed=for_model, skip=excluded)
    if dense is not None:
        _dense(db, dense, req.query, kinds, cands, hide_suppressed=for_model)
    adapted: list[Candidate] = []
    if for_model:
        adapted = adaptations(db)
        # adaptations are always given, apart from the results; what the model has verbatim is not
        cands = [c for c in cands if c.type != "adaptation" and c.id not in excluded]
    _score(cands, Coverage(terms), wins, _named_speakers(index, req.query), now.timestamp())
    cands.sort(key=lambda c: (-c.score, -c.ts, c.id))
    chosen: list[Candidate] = []
    tokens = 0
    if for_model:
        budget = req.budget_tokens or default_budget
        tokens = sum(tokens_of(a.text) for a in adapted)
        for c in cands:
            if len(chosen) >= req.limit:
                break
            cost = tokens_of(c.text)
            if tokens + cost > budget:
                continue  # a shorter one further down may still fit
            chosen.append(c)
            tokens += cost
    else:
        chosen = cands[: req.limit]
    return MemorySearchReply(
        results=[_result(c) for c in chosen],
        adaptations=[_result(a) for a in adapted],
        tokens=tokens,
        indexed_through_seq=through,
        took_ms=round((time.perf_counter() - started) * 1000, 3),
    )
