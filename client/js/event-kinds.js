// What each ledger event kind is on the timeline: a row of its own, inner activity, folded
// bookkeeping, a structural marker, hidden, or about another event. Pure, no DOM.

/** Kinds shown as Inner Plane activity: collapsed, never styled like a message. */
export const INNER_KINDS = new Set([
  "context.usage",
  "model.usage",
  "context.compacted",
  "context.capsule",
  "memory.retrieved",
  "memory.extracted",
  "memory.fact.added",
  "memory.fact.cited",
  "memory.fact.edited",
  "memory.fact.forgotten",
  "import.started",
  "import.finished",
  "tool.call",
  "tool.result",
  "inner.signal",
  "inner.decision",
  "checkpoint",
  "activation.outcome",
  "reminder.set",
  "reminder.changed",
  "reminder.cancelled",
  "session.started",
  "session.ended",
  "voice.timing",
]);

/**
 * Context management: folded into one quiet "inner activity" line per turn instead of a row
 * between every question and answer. Tool calls, tasks and activations keep their own rows.
 */
export function isFoldedKind(kind) {
  return (
    typeof kind === "string" &&
    (kind.startsWith("context.") ||
      kind.startsWith("memory.") ||
      kind.startsWith("inner.") ||
      kind === "checkpoint" ||
      kind === "model.usage" ||
      kind === "voice.timing")
  );
}

/**
 * Kinds that keep a row of their own in the flow: what was said, what went wrong, what was
 * done on the owner's behalf. Every other kind is bookkeeping (context management, memory,
 * decisions, run pictures, and kinds this client does not know yet): it folds into the inner
 * activity of its turn or span and never shows as a raw kind.
 */
const ROW_KINDS = new Set([
  "message",
  "turn.failed",
  "inbound.refused",
  "tool.call",
  "tool.result",
  "inner.signal",
  "activation.outcome",
  "budget.notice",
  "reminder.set",
  "reminder.changed",
  "reminder.cancelled",
  "session.started",
  "session.ended",
  "call.placed",
  "call.voicemail",
  "import.started",
  "import.finished",
]);

/** Bookkeeping: folded into the inner activity of its turn, span or the span before it. */
export function isBookkeepingKind(kind) {
  if (typeof kind !== "string") return false;
  if (kind.startsWith("task.")) return false;
  return isFoldedKind(kind) ? kind !== "inner.signal" : !ROW_KINDS.has(kind);
}

export function isInnerKind(kind) {
  return INNER_KINDS.has(kind) || (typeof kind === "string" && kind.startsWith("task."));
}


/** Kinds that structure the timeline but are not items of their own. */
export const STRUCTURAL_KINDS = new Set(["conversation.opened", "span.opened", "span.closed"]);

/**
 * The system's own bookkeeping, kept in the ledger but never on the timeline: `term.*` says
 * which process held a singleton's lease (a restart or failover must not look like a break in
 * the relationship). They still count for `maxSeq`, so a reconnect resumes after them.
 * (`session.*` are calls now: the ledger's migration 003 renamed the old lease events.)
 */
export function isHiddenKind(kind) {
  return typeof kind === "string" && (kind.startsWith("term.") || kind === "mail.progress");
}

/**
 * Kinds that describe another event (their `parent_id`) and show on it, never as rows:
 * how an outbound SMS or email is being delivered, and what became of an inbound one's
 * attachments. Either may load before or after the event it belongs to.
 */
export const ATTACHED_KINDS = new Set(["delivery", "attachment.stored"]);

export function isAttachedKind(kind) {
  return ATTACHED_KINDS.has(kind);
}
