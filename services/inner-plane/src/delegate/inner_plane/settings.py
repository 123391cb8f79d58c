"""The inner plane's one settings class (env var names as in interfaces.md)."""

from zoneinfo import ZoneInfo

from pydantic import Field, model_validator

from delegate.runtime.openai_bounds import CompactThreshold
from delegate.runtime.settings import ServiceSettings
from delegate.runtime.spend import BudgetSettings

from .quiet_hours import QuietHours


# One setting a line, each named with its variable: alike in shape by design, each a different knob.
class Settings(ServiceSettings, BudgetSettings):  # BUDGET_*: the spend lines (runtime.spend)
    idle_span_seconds: float = Field(default=900.0, gt=0)  # IDLE_SPAN_SECONDS
    compact_threshold: CompactThreshold = 200_000  # COMPACT_THRESHOLD
    capsule_threshold: float = Field(default=0.6, gt=0)  # CAPSULE_THRESHOLD (fraction of COMPACT_THRESHOLD)
    openai_model: str = "gpt-5.5"  # OPENAI_MODEL
    capsule_model: str = ""  # CAPSULE_MODEL; empty: OPENAI_MODEL
    memory_model: str = ""  # MEMORY_MODEL; empty: OPENAI_MODEL
    openai_timeout_seconds: float = Field(default=120.0, gt=0)  # OPENAI_TIMEOUT_SECONDS (per model call)
    # A failed capsule refresh or extraction is retried after base * 2^n seconds, capped.
    inner_retry_seconds: float = Field(default=5.0, gt=0)  # INNER_RETRY_SECONDS
    inner_retry_max_seconds: float = Field(default=300.0, gt=0)  # INNER_RETRY_MAX_SECONDS
    # What one capsule refresh may read: the newest turns since the previous capsule, bounded.
    capsule_max_turns: int = Field(default=200, ge=1)  # CAPSULE_MAX_TURNS
    capsule_max_chars: int = Field(default=60_000, ge=1000)  # CAPSULE_MAX_CHARS
    # Memory extraction splits a long checkpoint range into calls of at most this much text.
    memory_chunk_chars: int = Field(default=60_000, ge=1000)  # MEMORY_CHUNK_CHARS
    # Signals claimed per activation, and how long to wait for the agent's outcome before moving on.
    activation_batch_max: int = Field(default=20, ge=1)  # ACTIVATION_BATCH_MAX
    activation_timeout_seconds: float = Field(default=600.0, gt=0)  # ACTIVATION_TIMEOUT_SECONDS
    # OWNER_TIMEZONE (BudgetSettings): quiet hours, reminders without a zone of their own, budgets.
    # "22:00-07:00" (HH:MM[:SS]-HH:MM[:SS], may wrap midnight); empty: none. Non-urgent signals wait.
    quiet_hours: str = ""  # QUIET_HOURS
    # The attention broker: a signal whose dedup key came within this window is a duplicate;
    # related signals wait this long to join one activation (urgent ones never wait).
    inner_dedup_window_s: float = Field(default=600.0, ge=0)  # INNER_DEDUP_WINDOW_S
    inner_coalesce_s: float = Field(default=2.0, ge=0)  # INNER_COALESCE_S
    # The interruption budget: proactive activations per owner-local day, seconds between wakes.
    inner_daily_budget: int = Field(default=10, ge=0)  # INNER_DAILY_BUDGET
    inner_min_wake_gap_s: float = Field(default=60.0, ge=0)  # INNER_MIN_WAKE_GAP_S
    # A user message still unanswered after this long no longer counts as the owner mid-turn.
    inner_turn_stale_s: float = Field(default=900.0, gt=0)  # INNER_TURN_STALE_S
    # The follower re-reads the ledger this often when no live event arrives, so a lost
    # notification of the newest event is noticed without waiting for the next one.
    inner_resync_seconds: float = Field(default=5.0, gt=0)  # INNER_RESYNC_SECONDS
    # Live notifications waiting for the follower. When it is full the subscription waits
    # (backpressure); whatever NATS then drops is a gap the follower reads back from the ledger.
    inner_queue_max: int = Field(default=1000, ge=1)  # INNER_QUEUE_MAX
    # Tries of a committed event whose processing raised, with backoff, before it is dead-lettered.
    inner_event_attempts: int = Field(default=3, ge=1)  # INNER_EVENT_ATTEMPTS

    @model_validator(mode="after")
    def _readable_quiet_hours(self) -> "Settings":
        QuietHours.parse(self.quiet_hours, self.zone)  # raises with what is wrong
        return self

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.owner_timezone)

    @property
    def capsule_line(self) -> float:
        """Input tokens at which the capsule refreshes (when the usage event names no threshold)."""
        return self.capsule_threshold * self.compact_threshold

    @property
    def capsule_model_name(self) -> str:
        return self.capsule_model or self.openai_model

    @property
    def memory_model_name(self) -> str:
        return self.memory_model or self.openai_model
