// A turn's context management folded into one quiet "inner activity" line, and that line's
// words. Pure, no DOM.

import { isBookkeepingKind, isFoldedKind } from "./event-kinds.js";

function isUserItem(item) {
  return item.type === "pending" || (item.type === "event" && item.event.kind === "message" && item.event.role === "user");
}

/**
 * One turn = a user message and everything after it up to the next one. Its context
 * management events (usage, compaction, capsule, memory, checkpoint, inner signals) become
 * one `activity` item at the end of the turn, after the answer; everything else keeps its place.
 */
export function foldTurns(items, spanId = "", { topLevel = false } = {}) {
  const out = [];
  // Between spans (top level) only a turn's own rows fold; an inner signal between spans
  // stays a row of its own.
  let turnKey = topLevel ? null : `${spanId}:start`;
  let folded = [];
  const flush = () => {
    if (folded.length) out.push(activityItem(turnKey, folded));
    folded = [];
  };
  for (const item of items) {
    if (isUserItem(item)) {
      flush();
      turnKey = item.key;
    } else if (topLevel && (item.type === "span" || item.type === "divider")) {
      flush();
      turnKey = null;
    }
    const fold = item.type === "event" && (isFoldedKind(item.event.kind) || isBookkeepingKind(item.event.kind));
    // Bookkeeping with no turn to fold into (before the first span) still folds, into a line of its own.
    if (fold && turnKey === null && isBookkeepingKind(item.event.kind)) turnKey = `top:${item.key}`;
    if (turnKey !== null && fold) folded.push(item.event);
    else out.push(item);
  }
  flush();
  return out;
}

function activityItem(turnKey, events) {
  return { type: "activity", key: `act:${turnKey}`, events, summary: activitySummary(events) };
}

const ACTIVITY_WORDS = [
  ["context.usage", "context used", "context-used readings"],
  ["model.usage", "model call", "model calls"],
  ["context.compacted", "summary of older messages", "summaries of older messages"],
  ["context.capsule", "what I keep in mind", "updates of what I keep in mind"],
  ["memory.retrieved", "memory lookup", "memory lookups"],
  ["memory.extracted", "memory saved", "memories saved"],
  ["memory.fact.added", "fact remembered", "facts remembered"],
  ["memory.fact.cited", "fact said again", "facts said again"],
  ["memory.fact.edited", "memory edit", "memory edits"],
  ["memory.fact.forgotten", "memory forgotten", "memories forgotten"],
  ["checkpoint", "checkpoint", "checkpoints"],
  ["voice.timing", "answer timing", "answer timings"],
  ["inner.signal", "signal", "signals"],
  ["inner.decision", "decision", "decisions"],
];

const OTHER_WORDS = { "thoughtflow.artifact": "run picture", "inner.signal": "signal" };

/** "3 background steps: memory lookup, context used, what I keep in mind": plain words, no jargon. */
export function activitySummary(events) {
  const counts = new Map();
  for (const ev of events) {
    const row = ACTIVITY_WORDS.find(([k]) => k === ev.kind);
    // A kind with no words of its own is never shown raw ("thoughtflow.artifact").
    const word = row ? row[1] : OTHER_WORDS[ev.kind] || "other step";
    const plural = row ? row[2] : `${word}s`;
    const entry = counts.get(word) || { n: 0, plural };
    entry.n += 1;
    counts.set(word, entry);
  }
  const parts = [...counts].map(([word, { n, plural }]) => (n === 1 ? word : `${n} ${plural}`));
  const failed = events.some((ev) => ev.payload && ev.payload.status === "failed");
  return `${events.length} background step${events.length === 1 ? "" : "s"}: ${parts.join(", ")}${failed ? " · one failed" : ""}`;
}
