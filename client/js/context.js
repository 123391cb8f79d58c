// The context figures the topbar shows, from one source: the timeline's own events
// (context.usage, context.compacted, context.capsule, conversation.*), with /api/state as the
// fallback where the loaded timeline says nothing. So a chip can never contradict a row.

function newest(events, pred) {
  for (let i = events.length - 1; i >= 0; i -= 1) if (pred(events[i])) return events[i];
  return null;
}

/**
 * {usage: {input_tokens, compact_threshold, percent} | null, compaction: event | null,
 *  capsule: {active, updated_at}, conversationId}
 * - the conversation is the state's, else the newest event's;
 * - usage is the newest context.usage of that conversation, or a newer compaction's
 *   "after" figure (that is what the context holds after it), else the state's;
 * - compaction is the newest successful context.compacted of that conversation (a new
 *   conversation has none: End conversation starts a fresh context);
 * - the capsule is active when the state says so or the timeline has one (it carries over).
 */
export function contextFigures(order, state) {
  const events = order || [];
  const s = state && typeof state === "object" ? state : {};
  const lastConv = newest(events, (e) => e.conversation_id && e.kind !== "conversation.ended" && !String(e.kind).startsWith("term."));
  const ended = newest(events, (e) => e.kind === "conversation.ended");
  let conversationId = s.conversation_id || null;
  if (!conversationId && lastConv && !(ended && events.indexOf(ended) > events.indexOf(lastConv))) conversationId = lastConv.conversation_id;
  const inConv = (e) => conversationId && e.conversation_id === conversationId;
  const usageEv = newest(events, (e) => e.kind === "context.usage" && inConv(e));
  const compaction = newest(events, (e) => e.kind === "context.compacted" && inConv(e) && (!e.payload || e.payload.status !== "failed"));
  const stateUsage = s.usage && Number.isFinite(s.usage.input_tokens) ? s.usage : null;
  const threshold =
    (usageEv && usageEv.payload && usageEv.payload.compact_threshold) || (stateUsage && stateUsage.compact_threshold) || null;
  let usage = null;
  const fromTokens = (tokens) => ({
    input_tokens: tokens,
    compact_threshold: threshold,
    percent: threshold ? (100 * tokens) / threshold : null,
  });
  const after = compaction && compaction.payload && Number.isFinite(compaction.payload.input_tokens_after) ? compaction.payload.input_tokens_after : null;
  if (compaction && after !== null && (!usageEv || events.indexOf(compaction) > events.indexOf(usageEv))) usage = fromTokens(after);
  else if (usageEv && Number.isFinite(usageEv.payload && usageEv.payload.input_tokens)) usage = fromTokens(usageEv.payload.input_tokens);
  else if (stateUsage && (!conversationId || !s.conversation_id || s.conversation_id === conversationId)) {
    usage = { ...stateUsage, percent: Number.isFinite(stateUsage.percent) ? stateUsage.percent : null };
  }
  const capsuleEv = newest(events, (e) => e.kind === "context.capsule");
  const stateCapsule = s.capsule || {};
  const updated = [stateCapsule.updated_at, capsuleEv && capsuleEv.ts].filter(Boolean).sort().pop() || null;
  return {
    conversationId,
    usage,
    compaction,
    capsule: { active: !!(stateCapsule.active || capsuleEv), updated_at: updated },
  };
}

/**
 * The "before" of a compaction row, from the same source as the usage rows: the newest
 * context.usage of its conversation before it (else the compaction's own figure).
 */
export function compactionBefore(order, compaction) {
  const events = order || [];
  const i = events.indexOf(compaction);
  for (let k = (i < 0 ? events.length : i) - 1; k >= 0; k -= 1) {
    const e = events[k];
    if (e.kind === "context.usage" && e.conversation_id === compaction.conversation_id) return e.payload.input_tokens;
  }
  const p = compaction.payload || {};
  return Number.isFinite(p.input_tokens_before) ? p.input_tokens_before : null;
}
