// How an Inner Plane event reads: one line when collapsed ({label, text, tone}) and its rows
// when expanded, for every kind the timeline folds or shows as inner activity. Pure functions;
// the DOM layer decides how they look.

import { attachmentText, mergeDelivery, refusedText } from "./channels.js";
import { channelInfo, clip, formatNumber, formatPercent, formatTime, plural, reminderSchedule, repeatWords } from "./format.js";
import { decisionSummary, signalSummary } from "./signal-words.js";

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
