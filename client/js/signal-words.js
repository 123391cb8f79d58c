// An inner-plane signal or decision in the owner's words: what came in (a fired reminder, an
// email, a task that ended) and what Delegate decided to do about it. Pure functions.

import { clip, durationWords, formatTime } from "./format.js";

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
