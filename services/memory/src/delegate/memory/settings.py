"""The memory service's one settings class (env var names as in interfaces.md)."""

from pathlib import Path

from pydantic import Field

from delegate.runtime.settings import ServiceSettings
from delegate.runtime.spend import BudgetSettings


class Settings(ServiceSettings, BudgetSettings):  # BUDGET_* and OWNER_TIMEZONE: extraction stops at the line
    # The search index: a projection of ledger events, rebuilt from them when it is missing.
    memory_index_path: Path | None = None  # MEMORY_INDEX_PATH; empty: RUNTIME_DATA_DIR/memory/index.sqlite
    # What a model request is given from memory when the request names no budget (tokens ≈ chars/4).
    memory_context_tokens: int = Field(default=1500, ge=1)  # MEMORY_CONTEXT_TOKENS
    # The follower re-reads the ledger this often when no live event arrives, so a lost
    # notification of the newest event is noticed without waiting for the next one.
    memory_resync_seconds: float = Field(default=5.0, gt=0)  # MEMORY_RESYNC_SECONDS
    # Live notifications waiting for the follower; when full the subscription waits, and what
    # NATS drops meanwhile is a gap the follower reads back from the ledger.
    memory_queue_max: int = Field(default=5000, ge=1)  # MEMORY_QUEUE_MAX
    # Tries of a committed event whose projection raised, before it is dead-lettered.
    memory_event_attempts: int = Field(default=3, ge=1)  # MEMORY_EVENT_ATTEMPTS
    # Rank by meaning too (all-MiniLM-L6-v2, the optional `embeddings` extra); off or not installed: full text only.
    memory_embeddings: bool = False  # MEMORY_EMBEDDINGS

    # Per-turn extraction (one model call per turn, off the hot path); off: index and search only.
    memory_extraction: bool = True  # MEMORY_EXTRACTION
    openai_model: str = "gpt-5.5"  # OPENAI_MODEL
    memory_model: str = ""  # MEMORY_MODEL; empty: OPENAI_MODEL
    openai_timeout_seconds: float = Field(default=120.0, gt=0)  # OPENAI_TIMEOUT_SECONDS (per model call)
    # A user turn is extracted with its answer once committed, or alone after this long without one.
    memory_extract_wait_s: float = Field(default=3.0, ge=0)  # MEMORY_EXTRACT_WAIT_S
    # Extraction waits for a pause: no message committed for this long (the owner reading or
    # typing), so its model call and writes never meet the next turn's request (issue #27).
    memory_extract_quiet_s: float = Field(default=2.0, ge=0)  # MEMORY_EXTRACT_QUIET_S
    # A conversation that never pauses still has each turn extracted this long after it was said.
    memory_extract_max_defer_s: float = Field(default=60.0, ge=0)  # MEMORY_EXTRACT_MAX_DEFER_S
    # Two wordings are one fact at this token-set Jaccard similarity (1.0: exact duplicates only).
    memory_dedup_threshold: float = Field(default=0.8, gt=0, le=1)  # MEMORY_DEDUP_THRESHOLD
    # Stored facts shown to the model with each turn (what it may repeat or correct).
    memory_candidates: int = Field(default=8, ge=0, le=50)  # MEMORY_CANDIDATES
    # A failed extraction is retried after base * 2^n seconds, capped; the turn stays pending.
    memory_retry_seconds: float = Field(default=5.0, gt=0)  # MEMORY_RETRY_SECONDS
    memory_retry_max_seconds: float = Field(default=300.0, gt=0)  # MEMORY_RETRY_MAX_SECONDS
    # Commitments' due dates ("on Friday") and people's key dates are read in the owner's zone
    # (OWNER_TIMEZONE, from BudgetSettings: the same zone the spend lines' days are).

    @property
    def memory_model_name(self) -> str:
        return self.memory_model or self.openai_model

    @property
    def index_path(self) -> Path:
        return self.memory_index_path or self.runtime_data_dir / "memory" / "index.sqlite"
