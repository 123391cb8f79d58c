// A span on the timeline (a conversation, a call, an activation, a task): its block, what it
// cost, its label and its one-line summary. Pure, no DOM.

import { clip } from "./format.js";
import { money } from "./usage.js";

export function spanBlock(id) {
  return {
    type: "span",
    key: `span:${id}`,
    span_id: id,
    spanType: null,
    activationId: null, // an activation span's activation (its run picture)
    opened: false, // its span.opened is loaded
    closed: false,
    closeReason: null,
    closeSummary: null,
    start: null,
    end: null,
    items: [],
    channels: [],
    messageCount: 0,
    innerCount: 0,
    firstText: null,
    calls: 0, // model calls billed to the span (its model.usage events)
    costUsd: 0, // their priced cost; `unpriced` when any came from a model with no price
    unpriced: false,
  };
}

/** What a span's model calls cost, from its `model.usage` events: "$0.0042 · 3 model calls". */
export function spanCost(b) {
  if (!b.calls) return "";
  const calls = `${b.calls} model call${b.calls === 1 ? "" : "s"}`;
  if (b.unpriced && !b.costUsd) return `unpriced · ${calls}`;
  return `${b.unpriced ? "at least " : ""}${money(b.costUsd)} · ${calls}`;
}

/** A span's times and channels, from each event that joins it. */
export function noteSpanEvent(b, ev) {
  if (!b.start) b.start = ev.ts;
  b.end = ev.ts;
  // The channels a span shows are where things were said, not where bookkeeping happened.
  if (ev.kind === "message" && ev.channel && ev.channel !== "inner" && !b.channels.includes(ev.channel)) {
    b.channels.push(ev.channel);
  }
}

/** A task's span, before markTaskSpan has run: its own bookkeeping stays out of it. */
export function looksLikeTask(b) {
  return b.spanType === "task" || (!b.opened && b.items.length > 0 && b.items.every((i) => i.type === "event" && i.event.kind.startsWith("task.")));
}

/**
 * A task's span (`span.opened` type "task", span id = task id) renders as one card with its
 * steps folded inside; one whose opening is not loaded is known by its events all being task.*.
 */
export function markTaskSpan(b) {
  const taskEvents = b.items.length > 0 && b.items.every((i) => i.type === "event" && i.event.kind.startsWith("task."));
  if (b.spanType === "task" || (!b.opened && taskEvents)) {
    b.task = true;
    b.spanType = "task";
    b.key = `task:${b.span_id}`;
  }
}

const SPAN_LABELS = {
  interaction: "Conversation",
  voice: "Browser voice call",
  phone: "Phone call",
  activation: "Delegate acting on its own",
  task: "Task",
};

export function spanLabel(spanType) {
  return SPAN_LABELS[spanType] || "Activity";
}

/** The one line shown when a span is collapsed. */
export function spanSummary(b) {
  if (b.closeSummary) return clip(b.closeSummary, 140);
  const parts = [];
  if (b.messageCount) parts.push(`${b.messageCount} message${b.messageCount === 1 ? "" : "s"}`);
  if (b.innerCount) parts.push(`${b.innerCount} inner step${b.innerCount === 1 ? "" : "s"}`);
  const count = parts.join(", ") || "no messages";
  const first = firstSentence(b.firstText);
  return first ? `${count} · “${clip(first, 90)}”` : count;
}

/**
 * The first full sentence of a text, for a title: a call's first transcript may be a fragment
 * ("H"), so a sentence needs a few words; without one, the whole text (or null).
 */
export function firstSentence(text) {
  if (typeof text !== "string" || !text.trim()) return null;
  const one = text.replace(/\s+/g, " ").trim();
  const m = /^(.+?[.!?])(\s|$)/.exec(one);
  if (m && m[1].split(" ").length >= 2) return m[1];
  return one.length >= 2 ? one : null;
}
