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

/** One line of at most n characters, with an ellipsis when cut. */
export function clip(text, n) {
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
      // The meter's words ("Context used"), so a row and the meter read as the same thing.
      return { label: "Context used", text: `${formatNumber(p.input_tokens)} tokens${share}`, tone: "" };
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
      return { label: "What I keep in mind", text: "updated (carried into the next conversation)", tone: "ok" };
    case "memory.retrieved": {
      const n = Array.isArray(p.items) ? p.items.length : 0;
      return { label: "Memory lookup", text: plural(n, "item") + (p.query ? ` for “${clip(p.query, 60)}”` : ""), tone: "" };
    }
    case "memory.extracted": {
      const n = Array.isArray(p.items) ? p.items.length : 0;
      if (p.summary) return { label: "Episode summarized", text: `${clip(p.summary, 80)} · ${plural(n, "fact")} noted`, tone: "" };
      return { label: "Memory saved", text: plural(n, "new item"), tone: "" };
    }
    case "memory.fact.added": {
      const replaces = Array.isArray(p.supersedes) && p.supersedes.length ? " · replaces an earlier fact" : "";
      return { label: "Remembered", text: `${clip(p.text, 80)}${replaces}`, tone: "" };
    }
    case "memory.fact.cited":
      return { label: "Remembered again", text: p.text ? clip(p.text, 80) : "a known fact, said again", tone: "" };
    case "memory.fact.edited":
      return { label: "Memory edited", text: clip(p.text, 80), tone: "" };
    case "memory.fact.forgotten":
      // Never the forgotten text itself: forgetting should not put it back on the screen.
      return { label: "Memory forgotten", text: "Delegate will not use it again", tone: "" };
    case "import.started":
      return { label: "Import", text: `${plural(p.lines || 0, "line")} into ${plural(p.conversations || 0, "past conversation")}`, tone: "" };
    case "import.finished":
      return p.status === "failed"
        ? { label: "Import failed", text: clip(p.message || "nothing was imported", 100), tone: "warn" }
        : { label: "Import done", text: `${plural(p.conversations || 0, "past conversation")} added to the timeline`, tone: "ok" };
    case "tool.call":
      return toolCallWords(p.name, p.arguments, ev.ts);
    case "tool.result":
      return {
        label: "Tool result",
        text: `${p.name || "tool"} · ${p.ok ? "ok" : `failed${p.error_code ? ` (${p.error_code})` : ""}`}`,
        tone: p.ok ? "ok" : "warn",
      };
    case "inner.signal":
      return signalSummary(p);
    case "inner.decision":
      return decisionSummary(p);
    case "checkpoint":
      return { label: "Checkpoint", text: `${plural(p.turn_count || 0, "turn")} saved for memory`, tone: "" };
    case "activation.outcome": {
      const parts = [OUTCOME_WORDS[p.status] || p.status || "done"];
      if (p.summary) parts.push(clip(p.summary, 80));
      if (p.reason && p.status !== "completed") parts.push(clip(p.reason, 80));
      if (p.reply_channel) parts.push(`answered by ${channelInfo(p.reply_channel).label}`);
      return { label: "Activation", text: parts.join(" · "), tone: p.status === "failed" ? "warn" : p.status === "completed" ? "ok" : "" };
    }
    case "reminder.set":
    case "reminder.changed": {
      const spec = (p.spec && typeof p.spec === "object" && p.spec) || {};
      const when = reminderSchedule(spec);
      const text = [clip(spec.text, 80), when].filter(Boolean).join(" · ");
      return { label: kind === "reminder.set" ? "Reminder set" : "Reminder changed", text, tone: "", variant: "reminder" };
    }
    case "reminder.cancelled": {
      // The cancel event names the reminder only; the page looks its text up (`figures.text`).
      const what = figures && figures.text ? clip(figures.text, 80) : "";
      return { label: "Reminder cancelled", text: [what, clip(p.reason, 80)].filter(Boolean).join(" · "), tone: "", variant: "reminder" };
    }
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
      // A call we placed that Twilio reports as never picked up ends as a hang-up too: say so.
      const missed = p.reason === "hangup" && Object.hasOwn(UNANSWERED_WORDS, p.detail) ? UNANSWERED_WORDS[p.detail] : undefined;
      const ok = ["hangup", "caller_hangup"].includes(p.reason) && !missed;
      const why = missed || CALL_END_WORDS[p.reason] || p.reason;
      return { label: what, text: `${ok ? "ended" : `ended: ${why}`}${took}`, tone: ok ? "" : "warn" };
    }
    case "call.placed":
      return { label: "Called you", text: clip(p.reason || "", 80), tone: "" };
    case "call.voicemail":
      // The same words went out by SMS either way.
      return p.action === "spoken"
        ? { label: "Voicemail left", text: clip(p.text, 80), tone: "" }
        : { label: "Machine answered", text: `hung up; texted you: ${clip(p.text, 60)}`, tone: "" };
    case "voice.timing": {
      const ms = p.speech_stopped_to_first_audio_ms ?? p.start_to_first_audio_ms;
      const when = p.start_to_first_audio_ms != null ? "greeting started" : "answer started";
      return { label: "Voice timing", text: Number.isFinite(ms) ? `${when} after ${Math.round(ms)} ms` : when, tone: "" };
    }
    case "budget.notice": {
      // The owner's spend line: told once per line and period, with the figures.
      const what = p.reason === "runaway" ? "Runaway guard" : "Spend limit reached";
      const waits = p.until ? ` · background work waits until ${formatTime(p.until)}` : "";
      return { label: what, text: `${clip(p.detail, 120)}${waits}`, tone: "warn" };
    }
    case "person.imported":
      return { label: "Contact imported", text: clip(p.name || "", 60), tone: "" };
    case "person.unlisted":
      // The card is gone from the address book; the person and what was said of them stay.
      return { label: "Contact removed", text: "no longer in your address book", tone: "" };
    case "contacts.synced": {
      const parts = [];
      if (p.imported) parts.push(`${p.imported} ${p.imported === 1 ? "contact" : "contacts"} read`);
      if (p.unlisted) parts.push(`${p.unlisted} removed`);
      if (p.birthdays) parts.push(`${p.birthdays} with a birthday`);
      return { label: "Contacts synced", text: parts.join(" · "), tone: "" };
    }
    case "inbound.refused": {
      const r = refusedText(ev);
      return { label: "Refused", text: [r.text, r.subject, r.preview].filter(Boolean).join(" · "), tone: "warn" };
    }
    default:
      if (kind.startsWith("task.")) {
        return { label: `Task ${kind.slice(5)}`, text: clip(p.task_id || "", 40), tone: kind === "task.failed" ? "warn" : "" };
      }
      // Never a raw kind: what it is in words, or a plain "Background step".
      return { label: KIND_WORDS[kind] || "Background step", text: "", tone: "" };
  }
}

const KIND_WORDS = { "thoughtflow.artifact": "Run picture", "push.delivery": "Notification", "calendar.synced": "Calendar synced" };

const OUTCOME_WORDS = { completed: "completed", failed: "failed", nothing_to_do: "nothing to do", ignored: "ignored" };

/** What kind of signal, in words. */
export const SIGNAL_WORDS = {
  "reminder.due": "reminder",
  "email.received": "email",
  "task.finished": "task finished",
  "task.failed": "task failed",
  "memory.relevant": "memory",
  script: "script",
};

/** The signal's own words: what it says, whichever kind it is. */
function signalText(kind, sp) {
  switch (kind) {
    case "email.received":
      return [sp.sender, sp.subject].filter(Boolean).join(": ");
    case "task.finished":
      return [sp.goal, sp.summary].filter(Boolean).join(": ") || sp.task_id || "";
    case "task.failed":
      return [sp.goal, sp.error].filter(Boolean).join(": ") || sp.task_id || "";
    default:
      return typeof sp.text === "string" ? sp.text : "";
  }
}

/**
 * An `inner.signal` row: kind, source and text in one compact line; a fired reminder reads as
 * the reminder itself, with "late by X" when it fired past its grace. Signals written before
 * signals were typed carry only `source`/`type`.
 */
export function signalSummary(p) {
  const sig = (p.signal && typeof p.signal === "object" && p.signal) || {};
  const kind = p.signal_kind || sig.kind || "";
  const sp = (sig.payload && typeof sig.payload === "object" && sig.payload) || {};
  const urgent = (p.urgency || sig.urgency) === "urgent";
  if (!kind) return { label: "Inner signal", text: `${p.source || "inner"} · ${SIGNAL_WORDS[p.type] || p.type || "signal"}`, tone: "", variant: "signal" };
  if (kind === "reminder.due") {
    const late = reminderLateness(sp);
    const text = [clip(sp.text, 100), late ? `late by ${late}` : "", urgent ? "urgent" : ""].filter(Boolean).join(" · ");
    return { label: "Reminder", text, tone: late ? "warn" : "ok", variant: "reminder-due", late };
  }
  const words = SIGNAL_WORDS[kind] || kind;
  const text = [words, p.source || sig.source || "", clip(signalText(kind, sp), 100), urgent ? "urgent" : ""].filter(Boolean).join(" · ");
  return { label: "Signal", text, tone: urgent || kind === "task.failed" ? "warn" : "", variant: "signal" };
}

/** "3 min" when a fired reminder was later than its grace allows, else "". */
export function reminderLateness(sp) {
  const late = Number(sp && sp.late_by_s);
  const grace = Number.isFinite(Number(sp && sp.grace_s)) ? Number(sp.grace_s) : 60;
  return Number.isFinite(late) && late > grace ? durationWords(late) : "";
}

const DECISION_WORDS = { act: "Acting", hold: "Waiting", drop: "Skipped", coalesce: "Handled together" };
// Every reason services/inner-plane writes (attention.py, budget.py, runtime/spend.py), and the
// older names earlier versions wrote, as the owner would say it. The payload's `detail` is for
// the expanded row: it is written for the logs ("held before: wake_gap").
const REASON_WORDS = {
  ready: "",
  urgent: "it is urgent",
  coalesced: "with a related signal",
  quiet_hours: "quiet hours",
  budget: "today's interruptions are used up",
  wake_gap: "too soon after the last one",
  min_gap: "too soon after the last one",
  budget_usd: "the spending limit is reached",
  runaway: "too many background calls in a minute",
  owner_mid_turn: "for your turn to end",
  mid_turn: "for your turn to end",
  duplicate: "the same came in just before",
  expired: "it expired",
  late: "it came too late, and the reminder says to skip it then",
  stale: "it was out of date",
};

/**
 * An `inner.decision` row, small and muted, in the owner's words: "Waiting (quiet hours until
 * 07:00)". A reason or decision this client does not know reads as a plain phrase, never a code.
 */
export function decisionSummary(p) {
  const word = DECISION_WORDS[p.decision] || "Decided what to do about it";
  const known = Object.prototype.hasOwnProperty.call(REASON_WORDS, p.reason);
  let why = known ? REASON_WORDS[p.reason] : "";
  // "quiet hours until 07:00"; a reason that is a clause takes a comma before its end.
  if (p.until) why = `${why}${why && why.includes(" ") && p.reason !== "quiet_hours" ? "," : ""} until ${formatTime(p.until)}`.trim();
  if (p.decision === "hold" && !p.until && !why) why = "for the right moment";
  return { label: "Decision", text: why ? `${word} (${clip(why, 140)})` : word, tone: "", variant: "decision" };
}

/** 42 → "42 s", 190 → "3 min", 7500 → "2 h 5 min", 180000 → "2 days 2 h". */
export function durationWords(seconds) {
  const s = Math.max(0, Math.round(Number(seconds) || 0));
  if (s < 60) return `${s} s`;
  // Rounded first, so 3,599 s reads "1 h", never "60 min".
  const minutes = Math.round(s / 60);
  if (minutes < 60) return `${minutes} min`;
  if (minutes < 24 * 60) return `${Math.floor(minutes / 60)} h${minutes % 60 ? ` ${minutes % 60} min` : ""}`;
  const hours = Math.round(s / 3600);
  const d = Math.floor(hours / 24);
  return `${d} day${d === 1 ? "" : "s"}${hours % 24 ? ` ${hours % 24} h` : ""}`;
}

const FREQ_WORDS = { SECONDLY: "second", MINUTELY: "minute", HOURLY: "hour", DAILY: "day", WEEKLY: "week", MONTHLY: "month", YEARLY: "year" };
const DAY_WORDS = { MO: "Mon", TU: "Tue", WE: "Wed", TH: "Thu", FR: "Fri", SA: "Sat", SU: "Sun" };

/** "FREQ=DAILY;BYHOUR=9;BYMINUTE=30" → "every day at 09:30"; an odd rule reads as itself. */
export function repeatWords(rrule) {
  const parts = {};
  for (const pair of String(rrule || "").replace(/^RRULE:/i, "").split(";")) {
    const [k, v] = pair.split("=");
    if (k && v) parts[k.trim().toUpperCase()] = v.trim().toUpperCase();
  }
  const unit = FREQ_WORDS[parts.FREQ];
  if (!unit) return String(rrule || "");
  const n = Number.parseInt(parts.INTERVAL || "1", 10);
  let text = n > 1 ? `every ${n} ${unit}s` : `every ${unit}`;
  if (parts.BYDAY) text += ` on ${parts.BYDAY.split(",").map((d) => DAY_WORDS[d.slice(-2)] || d).join(", ")}`;
  if (parts.BYHOUR && !parts.BYHOUR.includes(",")) {
    const minute = parts.BYMINUTE && !parts.BYMINUTE.includes(",") ? parts.BYMINUTE : "0";
    text += ` at ${parts.BYHOUR.padStart(2, "0")}:${minute.padStart(2, "0")}`;
  }
  if (parts.COUNT) text += `, ${parts.COUNT} times`;
  return text;
}

/** When a reminder spec fires, in words: a time, "every day at 09:00", or its cron line. */
export function reminderSchedule(spec) {
  if (!spec || typeof spec !== "object") return "";
  if (spec.at) return formatTime(spec.at);
  if (spec.rrule) return repeatWords(spec.rrule);
  if (spec.cron) return `cron ${spec.cron}`;
  return "";
}

const CALL_END_WORDS = {
  realtime_lost: "the model's connection dropped",
  stream_lost: "the line dropped",
  voice_lost: "the voice service stopped",
  unclaimed: "never connected",
  superseded: "taken over",
  error: "an error",
};

// Twilio's final CallStatus of a call nobody picked up (a session.ended hang-up's detail).
const UNANSWERED_WORDS = { "no-answer": "not answered", busy: "the line was busy", failed: "the call failed", canceled: "cancelled" };

function callLength(seconds) {
  const s = Math.max(0, Math.round(seconds));
  return s < 60 ? `${s} s` : `${Math.floor(s / 60)} min ${s % 60} s`;
}

/** A tool's name in words: "send_sms_to_owner" -> "Send sms to owner", "hotels.book" -> "Hotels book". */
function toolName(name) {
  const words = String(name || "a tool").replace(/[._-]+/g, " ").trim();
  return words.charAt(0).toUpperCase() + words.slice(1);
}

/** When a reminder's arguments say it is due, in local time ("14:05"), else "". */
function reminderWhen(args, ts) {
  if (typeof args.at === "string" && !Number.isNaN(Date.parse(args.at))) return `at ${formatTime(args.at)}`;
  const secs = Number(args.in_seconds);
  const base = Date.parse(ts);
  if (Number.isFinite(secs) && !Number.isNaN(base)) return `at ${formatTime(new Date(base + secs * 1000).toISOString())}`;
  if (typeof args.rrule === "string") return repeatWords(args.rrule);
  return "";
}

const TOOL_WORDS = {
  set_reminder: "Set a reminder",
  change_reminder: "Change a reminder",
  cancel_reminder: "Cancel a reminder",
  list_reminders: "Look at the reminders",
  web_search: "Search the web",
  send_sms_to_owner: "Text you",
  send_email_to_owner: "Email you",
  call_owner: "Call you",
};

/**
 * A tool call as the owner would say it: "Set a reminder: stretch at 14:05", "Search the web:
 * hotels in Porto"; an unknown tool shows its name in words and its values, never `name(k: v)`.
 */
export function toolCallWords(name, args, ts) {
  const a = (args && typeof args === "object" && args) || {};
  const label = TOOL_WORDS[name] || toolName(name);
  if (name === "set_reminder" || name === "change_reminder") {
    const text = [typeof a.text === "string" ? clip(a.text, 80) : "", reminderWhen(a, ts)].filter(Boolean).join(" ");
    return { label: "Action", text: text ? `${label}: ${text}` : label, tone: "" };
  }
  if (name === "web_search" && typeof a.query === "string") return { label: "Action", text: `${label}: ${clip(a.query, 80)}`, tone: "" };
  const values = Object.values(a)
    .filter((v) => v !== null && v !== undefined && v !== "")
    .map((v) => (typeof v === "string" ? v : JSON.stringify(v)));
  return { label: "Action", text: values.length ? `${label}: ${clip(values.join(", "), 80)}` : label, tone: "" };
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

// One formatter each, made once: toLocale*String(…, options) builds a new Intl.DateTimeFormat
// on every call, and a timeline of 5,000 events asks for three times that many times (its
// first render spent most of its time there).
const TIME = new Intl.DateTimeFormat(undefined, { hour: "numeric", minute: "2-digit" });
const WEEKDAY = new Intl.DateTimeFormat(undefined, { weekday: "short" });
const DAY_MONTH = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short" });
const DAY_MONTH_YEAR = new Intl.DateTimeFormat(undefined, { day: "numeric", month: "short", year: "numeric" });
const FULL = new Intl.DateTimeFormat(undefined, {
  year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric",
});

/** "14:05" today, "Tue 14:05" this week, "3 Mar 14:05" this year, else with the year. */
export function formatTime(ts, now = new Date()) {
  const d = toDate(ts);
  if (!d) return "";
  const time = TIME.format(d);
  if (sameDay(d, now)) return time;
  const days = (now - d) / 86400000;
  if (days >= 0 && days < 6) return `${WEEKDAY.format(d)} ${time}`;
  return `${(d.getFullYear() !== now.getFullYear() ? DAY_MONTH_YEAR : DAY_MONTH).format(d)} ${time}`;
}

/** A span's time range: "14:05–14:32", or both ends in full when they fall on different days. */
export function formatRange(start, end, now = new Date()) {
  const a = toDate(start);
  const b = toDate(end);
  if (!a) return "";
  if (!b || b - a < 60000) return formatTime(a, now);
  const tail = sameDay(a, b) ? TIME.format(b) : formatTime(b, now);
  return `${formatTime(a, now)}–${tail}`;
}

export function fullTime(ts) {
  const d = toDate(ts);
  return d ? FULL.format(d) : "";
}
