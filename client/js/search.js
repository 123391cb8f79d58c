// Search over the loaded timeline, and export of it: pure functions, no DOM.

import { isAttachedKind, isHiddenKind } from "./event-kinds.js";
import { innerSummary } from "./inner-words.js";

/** The text an event is found by: what was said, or an inner row's one-line summary. */
export function searchableText(ev) {
  if (!ev || typeof ev !== "object") return "";
  const p = ev.payload || {};
  if (ev.kind === "message") {
    // An email is found by its subject and sender too, an attachment by its name.
    const m = p.meta && typeof p.meta === "object" ? p.meta : {};
    const names = (Array.isArray(m.attachments) ? m.attachments : []).map((a) => (a && typeof a.name === "string" ? a.name : ""));
    return [p.text, m.subject, m.from, ...names].filter((x) => typeof x === "string" && x).join(" ");
  }
  if (ev.kind === "turn.failed") return `${p.message ?? ""} ${p.code ?? ""}`;
  const s = innerSummary(ev);
  return `${s.label} ${s.text}`;
}

function fold(text) {
  return String(text).toLocaleLowerCase().normalize("NFKD").replace(/\p{M}/gu, "");
}

/** The terms of a query: "quoted phrases" stay whole, other words stand alone. */
export function queryTerms(query) {
  const terms = [];
  const text = fold(query || "").replace(/"([^"]*)"?/g, (_, phrase) => {
    const p = phrase.replace(/\s+/g, " ").trim();
    if (p) terms.push(p);
    return " ";
  });
  for (const w of text.split(/\s+/)) if (w) terms.push(w);
  return terms;
}

/**
 * The events matching `query` (every term, case- and accent-insensitive), oldest first.
 * Bookkeeping the page never shows (term.*, structural kinds) is never a hit, nor are the
 * delivery and attachment events shown on a message.
 */
export function searchEvents(events, query) {
  const words = queryTerms(query);
  if (!words.length) return [];
  const out = [];
  for (const ev of events || []) {
    // Delivery and attachment events show on their message, which is what a hit would find.
    if (!ev || isHiddenKind(ev.kind) || isAttachedKind(ev.kind) || ev.kind === "span.opened" || ev.kind === "span.closed" || ev.kind === "conversation.opened") continue;
    const hay = fold(searchableText(ev)).replace(/\s+/g, " ");
    if (words.every((w) => hay.includes(w))) out.push(ev);
  }
  return out;
}

const WHO = { user: "You", assistant: "Delegate" };

/** The timeline as Markdown: messages as quotes under a heading, inner activity as notes. */
export function toMarkdown(events, { title = "Delegate timeline", exportedAt = new Date().toISOString() } = {}) {
  const lines = [`# ${title}`, "", `Exported ${exportedAt}.`, ""];
  for (const ev of events || []) {
    if (!ev || isHiddenKind(ev.kind)) continue;
    const p = ev.payload || {};
    if (ev.kind === "message") {
      const who = WHO[ev.role] || ev.role || "Note";
      const marks = [ev.channel && ev.channel !== "text" ? ev.channel : null, p.stopped ? "stopped" : null, p.attempt > 1 ? `attempt ${p.attempt}` : null, p.supersedes ? "edited" : null].filter(Boolean);
      lines.push(`## ${who} · ${ev.ts}${marks.length ? ` · ${marks.join(", ")}` : ""}`, "", String(p.text ?? ""), "");
    } else if (ev.kind === "turn.failed") {
      lines.push(`> **Not answered** (${ev.ts}): ${p.message ?? ""}`, "");
    } else if (ev.kind === "conversation.ended") {
      lines.push("---", "", `*Conversation ended ${ev.ts}*`, "");
    } else if (ev.kind === "conversation.opened" || ev.kind === "span.opened" || ev.kind === "span.closed") {
      continue;
    } else {
      const s = innerSummary(ev);
      lines.push(`> *${s.label}${s.text ? `: ${s.text}` : ""}* (${ev.ts})`, "");
    }
  }
  return `${lines.join("\n").trimEnd()}\n`;
}

/** The timeline as JSON: the ledger's events exactly as loaded, oldest first. */
export function toJSON(events, { exportedAt = new Date().toISOString() } = {}) {
  const kept = (events || []).filter((ev) => ev && !isHiddenKind(ev.kind));
  return `${JSON.stringify({ exported_at: exportedAt, events: kept }, null, 2)}\n`;
}
