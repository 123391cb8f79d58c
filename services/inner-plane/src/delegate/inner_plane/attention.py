"""The attention policy: what to do about each pending signal now. Pure: state + clock in, decisions out.

Order of the rules, for every signal without a final decision:
1. drop: a duplicate (same dedup key inside INNER_DEDUP_WINDOW_S; the first one wins), an
   expired one, or a reminder that came too late and says ``late_policy=skip``;
2. while an activation is in flight, nothing else: one at a time (they wait behind it);
3. hold: spend at a BUDGET_* line or the runaway guard tripped (everyone: ``budget_usd`` /
   ``runaway``, until the period resets or the pause ends), quiet hours (non-urgent), the
   interruption budget or the gap between wakes (non-urgent), the owner mid-turn (everyone).
   A hold is written once per (reason, until);
4. the rest is ready. The first ready signal (urgent ones first) leads: related ready signals
   (same kind and source) join it for INNER_COALESCE_S, then the batch acts: ``act`` on the
   lead, ``coalesce`` on the others. An urgent lead, or a full batch, acts at once.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from delegate.runtime.spend import Limits

from .budget import Budget
from .clock import Clock
from .quiet_hours import QuietHours
from .state import BrokerState, PendingSignal
from .turns import busy

DecisionKind = Literal["act", "hold", "drop", "coalesce"]
_TICK = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Decision:
    signal_id: str
    decision: DecisionKind
    reason: str
    detail: str = ""
    until: datetime | None = None
    signal_ids: tuple[str, ...] = ()  # act / coalesce: the whole batch, lead first


@dataclass(frozen=True)
class Plan:
    decisions: list[Decision]
    next_at: datetime | None  # when to look again without a wake (a hold ends, a window closes)


@dataclass(frozen=True)
class AttentionConfig:
    quiet: QuietHours | None
    budget: Budget
    dedup_window: timedelta
    coalesce: timedelta
    batch_max: int
    turn_stale: timedelta
    limits: Limits | None = None  # the spend lines; None: none (unit tests of the other rules)


@dataclass
class Attention:
    config: AttentionConfig
    clock: Clock
    # When each ready signal was first seen ready: a coalescing window runs from its lead's.
    # In memory only: after a restart a window opens again, which delays nothing much.
    ready_since: dict[str, datetime] = field(default_factory=dict)

    def plan(self, state: BrokerState) -> Plan:
        now = self.clock()
        cfg = self.config
        decisions: list[Decision] = []
        times: list[datetime] = []
        alive: list[PendingSignal] = []
        for signal in state.pending.values():
            dropped = self._drop(signal, now)
            if dropped is not None:
                decisions.append(dropped)
            else:
                alive.append(signal)
                if signal.expires_at is not None:
                    times.append(signal.expires_at + _TICK)  # dropped once strictly past it
        self.ready_since = {k: v for k, v in self.ready_since.items() if k in state.pending}
        if state.batch is not None:
            return Plan(decisions, _earliest(times))
        owner = busy(state, now, cfg.turn_stale)
        if owner is not None and owner[1] is not None:
            times.append(owner[1])  # a stale turn stops counting then
        ready: list[PendingSignal] = []
        for signal in alive:
            hold = self._gate(signal, state, now, owner)
            if hold is None:
                ready.append(signal)
                self.ready_since.setdefault(signal.id, now)
                continue
            self.ready_since.pop(signal.id, None)
            if hold.until is not None:
                times.append(hold.until)
            if signal.hold is None or (signal.hold.reason, signal.hold.until) != (hold.reason, hold.until):
                decisions.append(Decision(signal.id, "hold", hold.reason, hold.detail, hold.until))
        if ready:
            acted, window_end = self._batch(ready, now)
            decisions.extend(acted)
            if window_end is not None:
                times.append(window_end)
        return Plan(decisions, _earliest(times))

    # ---- the rules ----------------------------------------------------------------------

    def _drop(self, signal: PendingSignal, now: datetime) -> Decision | None:
        if signal.duplicate_of is not None and signal.decisions == 0:
            window = self.config.dedup_window.total_seconds()
            return Decision(
                signal.id, "drop", "duplicate",
                f"same dedup key {signal.dedup_key!r} as signal {signal.duplicate_of} within {window:.0f} s",
            )
        if signal.expires_at is not None and signal.expires_at < now:
            return Decision(signal.id, "drop", "expired", f"expired at {signal.expires_at.isoformat()}")
        if signal.kind == "reminder.due":
            payload = signal.signal.get("payload") or {}
            late_by = float(payload.get("late_by_s") or 0.0)
            grace = float(payload.get("grace_s") or 0.0)
            if payload.get("late_policy") == "skip" and late_by > grace and signal.decisions == 0:
                return Decision(
                    signal.id, "drop", "late",
                    f"late by {late_by:.0f} s (grace {grace:.0f} s) and the reminder says skip",
                )
        return None

    def _gate(
        self, signal: PendingSignal, state: BrokerState, now: datetime, owner: tuple[str, datetime | None] | None
    ) -> "_Hold | None":
        cfg = self.config
        if cfg.limits is not None:
            # Money is the owner's line for every activation, urgent ones too: they are told.
            spend = state.spend.hold(now, cfg.limits, "activation")
            if spend is not None:
                return _Hold(spend.reason, spend.until, spend.detail)
        if not signal.urgent:
            if cfg.quiet is not None:
                end = cfg.quiet.end_of(now)
                if end is not None:
                    return _Hold("quiet_hours", end, cfg.quiet.describe_end(end))
            limit = cfg.budget.limit(state.wakes, now)
            if limit is not None:
                return _Hold(limit.reason, limit.until, limit.detail)
        if owner is not None:
            return _Hold("owner_mid_turn", None, f"{owner[0]}; acting once the turn ends")
        return None

    def _batch(self, ready: list[PendingSignal], now: datetime) -> tuple[list[Decision], datetime | None]:
        """The act (and coalesces) of the lead's batch, or the end of its window to wait for."""
        lead = next((s for s in ready if s.urgent), ready[0])
        related = [s for s in ready if s is not lead and (s.kind, s.source) == (lead.kind, lead.source)]
        batch = [lead, *related][: self.config.batch_max]
        window_end = self.ready_since[lead.id] + self.config.coalesce
        if not any(s.urgent for s in batch) and len(batch) < self.config.batch_max and now < window_end:
            return [], window_end
        ids = tuple(s.id for s in batch)
        size = f"{len(batch)} signal(s)"
        reason = "urgent" if any(s.urgent for s in batch) else "ready"
        detail = f"woke the agent with {size}" + (" (urgent: no quiet hours, no budget)" if reason == "urgent" else "")
        if lead.hold is not None:
            detail += f"; held before: {lead.hold.reason}"
        out = [Decision(lead.id, "act", reason, detail, signal_ids=ids)]
        out.extend(
            Decision(s.id, "coalesce", "coalesced", f"joins the activation led by signal {lead.id}", signal_ids=ids)
            for s in batch[1:]
        )
        return out, None


@dataclass(frozen=True)
class _Hold:
    reason: str
    until: datetime | None
    detail: str


def _earliest(times: Iterable[datetime]) -> datetime | None:
    return min(times, default=None)
