// Words for what the timeline shows: channel labels, inner-plane one-liners, times.
// Pure functions; the DOM layer decides how they look.

import { attachmentText, mergeDelivery, refusedText } from "./channels.js";

export const CHANNELS = {
  text: { label: "Text", icon: "text" },
  browser_voice: { label: "Browser voice", icon: "mic" },
  phone: { label: "Phone", icon: "phone" },
  sms: { label: "SMS", icon: "sms" },
  email: { label: "Email", icon: "mail" },
  inner: { label: "Inner", icon: "inner" },
};

export function channelInfo(channel) {
  return CHANNELS[channel] || { label: String(channel || "Unknown"), icon: "text" };
}

const numberFormat = new Intl.NumberFormat("en-US");

export function formatNumber(n) {
  return Number.isFinite(n) ? numberFormat.format(n) : "–";
}

export function formatPercent(p) {
  if (!Number.isFinite(p)) return "–";
  if (p > 0 && p < 1) return "<1%";
  return `${Math.round(p)}%`;
}

function plural(n, word) {
  return `${n} ${word}${n === 1 ? "" : "s"}`;
}

function clip(text, n) {
  const one = String(text ?? "").replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
}

/**
 * How an Inner Plane event reads when collapsed: {label, text, tone}.
 * `tone` is "ok", "warn" or "" and only tints the marker.
 */
export function innerSummary(ev, figures = null) {
  const p = (ev && ev.payload) || {};
  const kind = ev ? ev.kind : "";
  switch (kind) {
    case "context.usage": {
      const pct = p.compact_threshold ? (100 * p.input_tokens) / p.compact_threshold : null;
      const share = pct === null ? "" : ` · ${formatPercent(pct)} full`;
      return { label: "Context check", text: `working context holds ${formatNumber(p.input_tokens)} tokens${share}`, tone: "" };
    }
    case "context.compacted": {
      if (p.status === "failed") return { label: "Summary failed", text: p.detail || p.message || "older messages were not summarized", tone: "warn" };
      const how = p.trigger === "manual" ? "Summarized on request" : "Summarized automatically";
      // "before" comes from the usage rows when the page has them (the same source as the meter).
      const before = figures && Number.isFinite(figures.before) ? figures.before : p.input_tokens_before;
      const sizes =
        Number.isFinite(before) && Number.isFinite(p.input_tokens_after)
          ? ` · ${formatNumber(before)} → ${formatNumber(p.input_tokens_after)} tokens`
          : "";
      return { label: "Older messages summarized", text: `${how}${sizes}`, tone: "ok" };
    }
    case "context.capsule":
      return { label: "Carry-over note", text: "updated (what Delegate keeps in mind between sessions)", tone: "ok" };
    case "memory.retrieved": {
      const n = Array.isArray(p.items) ? p.items.length : 0;
      return { label: "Memory lookup", text: plural(n, "item") + (p.query ? ` for “${clip(p.query, 60)}”` : ""), tone: "" };
    }
    case "memory.extracted": {
      const n = Array.isArray(p.items) ? p.items.length : 0;
      return { label: "Memory saved", text: plural(n, "new item"), tone: "" };
    }
    case "tool.call":
      return { label: "Tool call", text: `${p.name || "tool"}(${clip(argsText(p.arguments), 60)})`, tone: "" };
    case "tool.result":
      return {
        label: "Tool result",
        text: `${p.name || "tool"} · ${p.ok ? "ok" : `failed${p.error_code ? ` (${p.error_code})` : ""}`}`,
        tone: p.ok ? "ok" : "warn",
      };
    case "inner.signal":
      return { label: "Inner signal", text: `${p.source || "inner"} · ${p.type || "signal"}`, tone: "" };
    case "checkpoint":
      return { label: "Checkpoint", text: `${plural(p.turn_count || 0, "turn")} saved for memory`, tone: "" };
    case "activation.outcome":
      return {
        label: "Activation",
        text: `${p.status || "done"}${p.summary ? ` · ${clip(p.summary, 80)}` : ""}`,
        tone: p.status === "failed" ? "warn" : "ok",
      };
    case "delivery": {
      const d = mergeDelivery([ev]);
      return { label: "Delivery", text: d ? d.words : String(p.status || ""), tone: d && d.tone === "bad" ? "warn" : "" };
    }
    case "attachment.stored": {
      const t = attachmentText({ name: p.name, content_type: p.content_type, size: p.size ?? null, stored: p.stored, reason: p.reason });
      return { label: "Attachment", text: [t.name, t.details, t.status].filter(Boolean).join(" · "), tone: p.stored === false ? "warn" : "" };
    }
    case "session.started": {
      const what = p.type === "phone" ? (p.direction === "outbound" ? "Calling you" : "Phone call") : "Voice call";
      return { label: what, text: p.type === "phone" && p.caller ? `started · ${p.caller}` : "started", tone: "" };
    }
    case "session.ended": {
      const what = p.type === "phone" ? "Phone call" : "Voice call";
      const took = Number.isFinite(p.duration_s) ? ` · ${callLength(p.duration_s)}` : "";
      const ok = ["hangup", "caller_hangup"].includes(p.reason);
      return { label: what, text: `${ok ? "ended" : `ended: ${CALL_END_WORDS[p.reason] || p.reason}`}${took}`, tone: ok ? "" : "warn" };
    }
    case "voice.timing": {
      const ms = p.speech_stopped_to_first_audio_ms ?? p.start_to_first_audio_ms;
      const when = p.start_to_first_audio_ms != null ? "greeting started" : "answer started";
      return { label: "Voice timing", text: Number.isFinite(ms) ? `${when} after ${Math.round(ms)} ms` : when, tone: "" };
    }
    case "inbound.refused": {
      const r = refusedText(ev);
      return { label: "Refused", text: [r.text, r.subject, r.preview].filter(Boolean).join(" · "), tone: "warn" };
    }
    default:
      if (kind.startsWith("task.")) {
        return { label: `Task ${kind.slice(5)}`, text: clip(p.task_id || "", 40), tone: kind === "task.failed" ? "warn" : "" };
      }
      return { label: kind || "Event", text: "", tone: "" };
  }
}

const CALL_END_WORDS = {
  realtime_lost: "the model's connection dropped",
  stream_lost: "the line dropped",
  voice_lost: "the voice service stopped",
  unclaimed: "never connected",
  superseded: "taken over",
  error: "an error",
};

function callLength(seconds) {
  const s = Math.max(0, Math.round(seconds));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

function argsText(args) {
  if (!args || typeof args !== "object") return "";
  return Object.entries(args)
    .map(([k, v]) => `${k}: ${typeof v === "string" ? JSON.stringify(v) : JSON.stringify(v)}`)
    .join(", ");
}

/**
 * The expanded detail of an Inner Plane event: [label, value, {pre}] rows.
 * Capsule text only ever appears here, as preformatted internal context.
 */
export function innerDetail(ev) {
  const p = (ev && ev.payload) || {};
  const rows = [];
  if (ev.kind === "context.capsule") {
    if (p.reason) rows.push(["Reason", String(p.reason)]);
    if (Number.isFinite(p.through_seq)) rows.push(["Covers events through", `#${p.through_seq}`]);
    rows.push(["Capsule", String(p.text ?? ""), { pre: true }]);
    return rows;
  }
  for (const [key, value] of Object.entries(p)) {
    if (value === null || value === undefined || value === "") continue;
    const label = key.replace(/_/g, " ");
    if (typeof value === "object") rows.push([label, JSON.stringify(value, null, 2), { pre: true }]);
    else rows.push([label, typeof value === "number" ? formatNumber(value) : String(value), {}]);
  }
  return rows;
}

function toDate(ts) {
  const d = ts instanceof Date ? ts : new Date(ts);
  return Number.isNaN(d.getTime()) ? null : d;
}

function sameDay(a, b) {
  return a.getFullYear() === b.getFullYear() && a.getMonth() === b.getMonth() && a.getDate() === b.getDate();
}

/** "14:05" today, "Tue 14:05" this week, "3 Mar 14:05" this year, else with the year. */
export function formatTime(ts, now = new Date()) {
  const d = toDate(ts);
  if (!d) return "";
  const time = d.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit" });
  if (sameDay(d, now)) return time;
  const days = (now - d) / 86400000;
  if (days >= 0 && days < 6) return `${d.toLocaleDateString(undefined, { weekday: "short" })} ${time}`;
  const opts = { day: "numeric", month: "short" };
  if (d.getFullYear() !== now.getFullYear()) opts.year = "numeric";
  return `${d.toLocaleDateString(undefined, opts)} ${time}`;
}

/** A span's time range: "14:05–14:32", or both ends in full when they fall on different days. */
export function formatRange(start, end, now = new Date()) {
  const a = toDate(start);
  const b = toDate(end);
  if (!a) return "";
  if (!b || b - a < 60000) return formatTime(a, now);
  const tail = sameDay(a, b) ? b.toLocaleTimeString(undefined, { hour: "numeric", minute: "2-digit" }) : formatTime(b, now);
  return `${formatTime(a, now)}–${tail}`;
}

export function fullTime(ts) {
  const d = toDate(ts);
  return d ? d.toLocaleString() : "";
}
