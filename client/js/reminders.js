// Reminders for the panel: pure data and one row builder, no network.
//
// The inner plane owns reminders (their `reminder.*` events are in the ledger); the gateway
// lists them at GET /api/reminders and cancels one at DELETE /api/reminders/{id}. The panel
// asks again whenever the timeline says something about reminders changed.

import { h } from "./dom.js";
import { durationWords, formatTime, fullTime, repeatWords } from "./format.js";

/** The reminders in a GET /api/reminders answer (`{"reminders": [...]}`, or a bare list). */
export function remindersFrom(body) {
  const list = Array.isArray(body) ? body : body && Array.isArray(body.reminders) ? body.reminders : [];
  return list.filter((r) => r && typeof r === "object" && typeof r.id === "string" && r.id);
}

function dueMs(r) {
  const ms = r.next_due ? Date.parse(r.next_due) : NaN;
  return Number.isNaN(ms) ? Infinity : ms;
}

/** Active reminders, soonest first (one with no time left goes last). */
export function upcomingReminders(list) {
  return list
    .filter((r) => (r.status || "active") === "active")
    .sort((a, b) => dueMs(a) - dueMs(b) || String(a.created_at || "").localeCompare(String(b.created_at || "")) || (a.id < b.id ? -1 : 1));
}

/** "in 5 min", "in 2 h 10 min", "now", "overdue by 3 min": how far the next time is. */
export function relativeDue(iso, now = new Date()) {
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return "";
  const s = (ms - now.getTime()) / 1000;
  if (Math.abs(s) < 1) return "now";
  return s > 0 ? `in ${durationWords(s)}` : `overdue by ${durationWords(-s)}`;
}

function spec(r) {
  return (r && r.spec && typeof r.spec === "object" && r.spec) || {};
}

/** How a reminder repeats, in words; "" for a one-shot. */
export function repeatText(r) {
  const s = spec(r);
  if (s.rrule) return repeatWords(s.rrule);
  if (s.cron) return `cron ${s.cron}`;
  return "";
}

/** A /chat event after which the list may have changed: a reminder set, changed, cancelled or fired. */
export function refreshesReminders(ev) {
  if (!ev || typeof ev.kind !== "string") return false;
  if (ev.kind.startsWith("reminder.")) return true;
  const p = ev.payload || {};
  return ev.kind === "inner.signal" && (p.signal_kind === "reminder.due" || (p.signal && p.signal.kind === "reminder.due"));
}

/** The text of reminder `id` from the newest `reminder.set`/`reminder.changed` among `events`. */
export function reminderText(events, id) {
  let text = null;
  for (const ev of events || []) {
    if ((ev.kind === "reminder.set" || ev.kind === "reminder.changed") && ev.payload && ev.payload.reminder_id === id) {
      const t = ev.payload.spec && ev.payload.spec.text;
      if (typeof t === "string") text = t;
    }
  }
  return text;
}

/** One row of the panel: the text, when, how it repeats, and its Cancel button. */
export function reminderRow(r, { now = new Date(), onCancel } = {}) {
  const s = spec(r);
  const text = typeof s.text === "string" ? s.text : "";
  const repeat = repeatText(r);
  const when = r.next_due
    ? h("time", { class: "reminder-when", datetime: r.next_due, title: fullTime(r.next_due), text: `${formatTime(r.next_due, now)} · ${relativeDue(r.next_due, now)}` })
    : h("span", { class: "reminder-when", text: "no time left" });
  const cancel = h("button", {
    type: "button",
    class: "ghost small reminder-cancel",
    "aria-label": `Cancel reminder: ${text}`,
    title: "Cancel this reminder",
    text: "Cancel",
    onclick: onCancel ? () => onCancel(r, cancel) : null,
  });
  return h(
    "li",
    { class: "reminder", "data-reminder-id": r.id, "data-revision": r.revision ?? "" },
    h(
      "div",
      { class: "reminder-main" },
      h("span", { class: "reminder-text", text }),
      h(
        "span",
        { class: "reminder-meta" },
        when,
        repeat ? h("span", { class: "reminder-repeat", text: repeat }) : null,
        s.urgency === "urgent" ? h("span", { class: "reminder-urgent", text: "urgent" }) : null,
      ),
    ),
    cancel,
  );
}
