"""The agent's one settings class; env var names as in interfaces.md, agent-only ones prefixed."""

from typing import Literal

from pydantic import Field, model_validator

from delegate.runtime.openai_bounds import CompactThreshold
from delegate.runtime.settings import ServiceSettings
from delegate.runtime.spend import BudgetSettings


class Settings(ServiceSettings, BudgetSettings):  # BUDGET_HARD_STOP_OWNER (hard_stop)
    # The official SDK reads OPENAI_API_KEY and OPENAI_BASE_URL itself (the base class gives it
    # the stand-in's when no key is set; see delegate.runtime.settings_source).
    openai_model: str = "gpt-5.5"  # OPENAI_MODEL
    openai_max_retries: int = 2  # OPENAI_MAX_RETRIES: the SDK's own retries before any stream output
    openai_timeout: float = 90.0  # OPENAI_TIMEOUT: seconds, also the longest silence inside a stream
    # COMPACT_THRESHOLD: input tokens at which compaction triggers; sent with every request, so
    # a value the API refuses would fail every turn: it stops the start instead.
    compact_threshold: CompactThreshold = 200_000
    capsule_threshold: float = Field(default=0.6, gt=0, le=1)  # CAPSULE_THRESHOLD: the inner plane acts on it
    # DELEGATE_OFFLINE_MODEL: the offline stand-in answers. Always true without a real key (what
    # /api/state reports must be the truth); setting it only forces the Offline badge on.
    delegate_offline_model: bool = False

    agent_stream_retries: int = 1  # AGENT_STREAM_RETRIES: whole-request retries after a broken stream
    agent_max_tool_rounds: int = 8  # AGENT_MAX_TOOL_ROUNDS: tool continuations in one turn
    agent_turn_timeout: float = 600.0  # AGENT_TURN_TIMEOUT: a turn still running after this fails
    # AGENT_OPENING_HOLD_MS: longest a user message's opening events wait for the turn's first delta
    # (a fast model's is not kept waiting behind their commit and fan-out); 0: they go out at once.
    agent_opening_hold_ms: int = Field(default=100, ge=0)
    agent_recent_turns: int = 20  # AGENT_RECENT_TURNS: verbatim turns in a fresh working context
    agent_recent_chars: int = 16_000  # AGENT_RECENT_CHARS: their character budget
    agent_ack_wait: float = 10.0  # AGENT_ACK_WAIT: a dead leader's input is redelivered after this
    agent_max_deliver: int = 30  # AGENT_MAX_DELIVER: deliveries before an input ends as turn.failed
    agent_lease_ttl: float = 3.0  # AGENT_LEASE_TTL: a standby takes over this long after the leader dies
    agent_lease_renew: float = 1.0  # AGENT_LEASE_RENEW: how often the leader renews the lease

    # Memory before each turn (the memory service's memory.cmd.search).
    memory_context_tokens: int = 1500  # MEMORY_CONTEXT_TOKENS: memory's budget in a request (0: none)
    memory_retrieval_wait_ms: int = 300  # MEMORY_RETRIEVAL_WAIT_MS: longest wait for it; later is "late"

    # Activations (the inner plane woke the agent) and inbound email while the owner is away.
    owner_timezone: str = "UTC"  # OWNER_TIMEZONE: due times in an activation are shown in it
    caldav_url: str | None = None  # CALDAV_URL: set, today's calendar is in every turn's instructions
    # ACTIVATION_CALLS: an urgent batch may phone the owner (call_owner); a signal's own
    # reply_via=call always may. Off by default: a call is the loudest interruption there is.
    activation_calls: bool = False
    # EMAIL_WHEN_AWAY: reply (answer at once, as always) or signal (an email arriving while the
    # owner is in no conversation is recorded and raised as an email.received signal instead).
    email_when_away: Literal["reply", "signal"] = "reply"

    @model_validator(mode="after")
    def _offline_without_a_key(self) -> "Settings":
        if self.openai.offline:
            self.delegate_offline_model = True
        return self
