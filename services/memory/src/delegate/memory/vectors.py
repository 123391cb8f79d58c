"""Dense vectors of the index's text rows (MEMORY_EMBEDDINGS): a derived projection of the
projection, so switching embeddings on or off never touches a ledger event.

Stored as plain float32 BLOBs in the index's ``vectors`` table and held in memory as one
contiguous matrix per kind. Not sqlite-vec: its KNN is brute force at this scale as well, it is
one more native extension to load (not every Python's sqlite3 can), and a query must not read
vectors out of SQLite at all: a numpy product over 100k x 384 float32 takes a few milliseconds.

Filled by a background thread from the rows the index already has (what is missing is embedded,
after a restart, a rebuild or a model change alike); the follower only wakes it, so applying
events never waits for the model. Retired facts may keep a vector: search reads a dense hit's
row back from SQLite with the same filters as full text, so they are never results.
"""

import logging
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from .embedder import Embedder, Vectors
from .index import MemoryIndex

log = logging.getLogger(__name__)

KINDS = ("fact", "episode", "message")
BATCH = 32  # texts per model call: a few hundred ms, then the lock and the CPU are free again
QUERY_CACHE = 256

# What is embedded for a row: for a message its speaker too, as bench/memory_score's baseline does.
PENDING_SQL = {
    "message": "SELECT rowid, coalesce(speaker || ': ', '') || text FROM messages m WHERE rowid > ?",
    "episode": "SELECT rowid, text FROM episodes m WHERE rowid > ?",
    # facts change (edits delete their vector) and are few: scanned whole every time
    "fact": "SELECT rowid, text FROM facts m WHERE rowid > ? AND status = 'active'",
}
MISSING = " AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.kind = ? AND v.row = m.rowid) ORDER BY rowid LIMIT ?"


class Matrix:
    """One kind's vectors in a contiguous array grown by doubling. Readers take ``_state`` in
    one read (buffer, row ids, count): a concurrent append or growth never shows them a torn view."""

    def __init__(self, dim: int) -> None:
        self._lock = threading.Lock()  # writers only
        self._pos: dict[int, int] = {}
        self._state: tuple[Vectors, npt.NDArray[np.int64], int] = (
            np.zeros((256, dim), dtype=np.float32), np.zeros(256, dtype=np.int64), 0,
        )

    def __len__(self) -> int:
        return self._state[2]

    def put(self, rows: list[int], vecs: Vectors) -> None:
        with self._lock:
            buf, ids, n = self._state
            fresh = [i for i, row in enumerate(rows) if row not in self._pos]
            if n + len(fresh) > len(buf):
                size = max(2 * len(buf), n + len(fresh))
                buf = np.concatenate([buf[:n], np.zeros((size - n, buf.shape[1]), dtype=np.float32)])
                ids = np.concatenate([ids[:n], np.zeros(size - n, dtype=np.int64)])
            for i, row in enumerate(rows):
                pos = self._pos.get(row)
                if pos is not None:
                    buf[pos] = vecs[i]  # a re-embedded (edited) fact: in place
            for i in fresh:
                buf[n] = vecs[i]
                ids[n] = rows[i]
                self._pos[rows[i]] = n
                n += 1
            self._state = (buf, ids, n)

    def top(self, q: Vectors, k: int) -> list[tuple[int, float]]:
        buf, ids, n = self._state
        if n == 0 or k <= 0:
            return []
        sims = buf[:n] @ q
        k = min(k, n)
        best = np.argpartition(-sims, k - 1)[:k]
        best = best[np.argsort(-sims[best])]
        return [(int(ids[i]), float(sims[i])) for i in best]

    def similarity(self, q: Vectors, rows: list[int]) -> dict[int, float]:
        buf, _, n = self._state
        out = {}
        for row in rows:
            pos = self._pos.get(row)
            if pos is not None and pos < n:
                out[row] = float(buf[pos] @ q)
        return out


class DenseVectors:
    """The vectors of one index: filling them (``fill_batch``) and querying them."""

    def __init__(self, index: MemoryIndex, queries: Embedder, batches: Embedder | None = None) -> None:
        self.index = index
        self.queries = queries
        self.batches = batches or queries
        self.matrices = {kind: Matrix(queries.dim) for kind in KINDS}
        self.embedded_through_seq = 0  # every row of the events through this seq has its vector
        self._after = dict.fromkeys(KINDS, 0)  # the rowid each kind's scan goes on from
        self._cache: OrderedDict[str, Vectors] = OrderedDict()
        self._cache_lock = threading.Lock()
        # vectors of another model (or of none recorded) are useless to this one: emptied first
        index.reset_vectors(f"{queries.name}/{queries.dim}")

    def load_stored(self) -> int:
        """Read what the table holds into memory (once, at start)."""
        db = self.index.reader()
        for kind in KINDS:
            rows, blobs = [], []
            for row, blob in db.execute("SELECT row, vec FROM vectors WHERE kind = ? ORDER BY row", (kind,)):
                rows.append(row)
                blobs.append(blob)
            if rows:
                vecs = np.frombuffer(b"".join(blobs), dtype=np.float32).reshape(len(rows), -1)
                self.matrices[kind].put(rows, vecs)
        return sum(len(m) for m in self.matrices.values())

    def fill_batch(self) -> int:
        """Embed one batch of rows that have no vector yet; 0 when none is left."""
        through = self.index.last_seq  # read first: a scan that then finds nothing covers it
        db = self.index.reader()
        for kind in KINDS:
            after = 0 if kind == "fact" else self._after[kind]
            found = db.execute(PENDING_SQL[kind] + MISSING, (after, kind, BATCH)).fetchall()
            if not found:
                continue
            rows = [int(r[0]) for r in found]
            texts = [str(r[1]) for r in found]
            vecs = self.batches.encode(texts)
            self.index.put_vectors(kind, [(row, vecs[i].tobytes(), texts[i]) for i, row in enumerate(rows)])
            self.matrices[kind].put(rows, vecs)
            self._after[kind] = rows[-1]
            return len(rows)
        self.embedded_through_seq = max(self.embedded_through_seq, through)
        return 0

    def fill(self) -> int:
        """Embed everything missing, in this thread (tests, and ``rebuild``)."""
        total = 0
        while done := self.fill_batch():
            total += done
        return total

    def query(self, text: str) -> Vectors:
        with self._cache_lock:
            if text in self._cache:
                self._cache.move_to_end(text)
                return self._cache[text]
        vec: Vectors = self.queries.encode([text])[0]
        with self._cache_lock:
            self._cache[text] = vec
            while len(self._cache) > QUERY_CACHE:
                self._cache.popitem(last=False)
        return vec

    def top(self, kind: str, q: Vectors, k: int) -> list[tuple[int, float]]:
        return self.matrices[kind].top(q, k)

    def similarity(self, kind: str, q: Vectors, rows: list[int]) -> dict[int, float]:
        return self.matrices[kind].similarity(q, rows)

    def count(self) -> int:
        return sum(len(m) for m in self.matrices.values())


class VectorWorker:
    """The service's background thread: loads the model (seconds), then keeps the vectors
    filled, woken by each batch the follower commits. ``dense`` is None until it is ready."""

    def __init__(self, index: MemoryIndex, load: Callable[[], Embedder]) -> None:
        self.index = index
        self.load = load
        self.dense: DenseVectors | None = None
        self.state = "loading the model"
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-vectors", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def close(self) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            # Two instances: a query never waits behind a background batch of the other.
            dense = DenseVectors(self.index, self.load(), self.load())
            stored = dense.load_stored()
            log.info("embeddings: model loaded, %d stored vectors read", stored)
            self.dense = dense
            self.state = "filling"
            while not self._stop.is_set():
                if dense.fill_batch():
                    continue
                self.state = "ready"
                self._wake.wait(timeout=5.0)
                self._wake.clear()
        except (sqlite3.ProgrammingError, sqlite3.OperationalError) as exc:
            if not self._stop.is_set():  # closing the index under a running scan is expected
                self._failed(exc)
        except Exception as exc:
            self._failed(exc)

    def _failed(self, exc: Exception) -> None:
        log.exception("embeddings failed, searching full text only from now on")
        self.dense = None
        self.state = f"failed: {exc!r}"[:200]

    def detail(self) -> str:
        dense = self.dense
        if dense is None:
            return f"embeddings: {self.state}"
        return f"embeddings: {self.state}, {dense.count()} vectors through seq {dense.embedded_through_seq}"
