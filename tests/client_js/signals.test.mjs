// Inner-plane rows: typed signals, broker decisions, activation outcomes and reminder events.
import assert from "node:assert/strict";
import { test } from "node:test";

import { durationWords, formatTime, repeatWords } from "../../client/js/format.js";
import { innerSummary } from "../../client/js/inner-words.js";
import { decisionSummary } from "../../client/js/signal-words.js";
import { innerNode } from "../../client/js/timeline-rows.js";
import { isHiddenKind, isInnerKind } from "../../client/js/event-kinds.js";
import { createTimeline, addEvents } from "../../client/js/timeline.js";
import { activitySummary } from "../../client/js/timeline-activity.js";
import { buildView } from "../../client/js/timeline-view.js";
import { elements, fakeDocument, serialize } from "./fakedom.mjs";
import { ev } from "./helpers.mjs";

/** An inner.signal event as the inner plane writes it (contracts: signal_event). */
function signalEvent(kind, payload, fields = {}) {
  const { urgency = "normal", source = "api", ...rest } = fields;
  const signal = { id: "sig-1", ts: "2026-01-05T09:00:00Z", source, urgency, kind, payload };
  return ev("inner.signal", { span_id: null, channel: "inner", ...rest, payload: { source, signal_kind: kind, urgency, signal } });
}

test("a signal is one compact row: kind, source and its text", () => {
  const s = innerSummary(signalEvent("script", { text: "The nightly backup failed", data: { code: 3 } }));
  assert.deepEqual([s.label, s.text, s.variant, s.tone], ["Signal", "script · api · The nightly backup failed", "signal", ""]);
  const urgent = innerSummary(signalEvent("script", { text: "Water leak" }, { urgency: "urgent", source: "home-assistant" }));
  assert.equal(urgent.text, "script · home-assistant · Water leak · urgent");
  assert.equal(urgent.tone, "warn");
  const failed = innerSummary(signalEvent("task.failed", { task_id: "ci-1", goal: "nightly build", error: "3 tests failed" }));
  assert.equal(failed.text, "task failed · api · nightly build: 3 tests failed");
  assert.equal(failed.tone, "warn");
  const done = innerSummary(signalEvent("task.finished", { task_id: "t-9" }));
  assert.equal(done.text, "task finished · api · t-9");
  const mail = innerSummary(signalEvent("email.received", { event_id: "e1", sender: "ana@example.org", subject: "Porto" }, { source: "pollers" }));
  assert.equal(mail.text, "email · pollers · ana@example.org: Porto");
});

test("a signal from before signals were typed still reads", () => {
  const s = innerSummary({ kind: "inner.signal", payload: { source: "timer", type: "due", priority: 1 } });
  assert.deepEqual([s.label, s.text], ["Inner signal", "timer · due"]);
  // A kind this client has words for reads as those words, not as its code.
  assert.equal(innerSummary({ kind: "inner.signal", payload: { source: "timer", type: "reminder.due" } }).text, "timer · reminder");
});

test("a fired reminder reads as the reminder, with 'late by X' only past its grace", () => {
  const due = (late_by_s, grace_s = 60) =>
    innerSummary(signalEvent("reminder.due", { reminder_id: "r1", text: "Stretch", due_at: "2026-01-05T09:00:00Z", late_by_s, grace_s }, { source: "reminders" }));
  assert.deepEqual([due(0.4).label, due(0.4).text, due(0.4).tone], ["Reminder", "Stretch", "ok"]);
  assert.equal(due(45).text, "Stretch", "inside its grace it is on time");
  assert.equal(due(190).text, "Stretch · late by 3 min");
  assert.equal(due(190).tone, "warn");
  assert.equal(due(7500, 0).text, "Stretch · late by 2 h 5 min");
  assert.equal(due(30, 10).variant, "reminder-due");
});

test("durations and repeat rules in words", () => {
  assert.deepEqual([5, 42, 190, 3599, 3600, 7500, 86400, 180000].map(durationWords), ["5 s", "42 s", "3 min", "1 h", "1 h", "2 h 5 min", "1 day", "2 days 2 h"]);
  assert.equal(repeatWords("FREQ=DAILY;BYHOUR=9;BYMINUTE=30"), "every day at 09:30");
  assert.equal(repeatWords("RRULE:FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,FR"), "every 2 weeks on Mon, Fri");
  assert.equal(repeatWords("FREQ=MONTHLY;COUNT=3"), "every month, 3 times");
  assert.equal(repeatWords("nonsense"), "nonsense");
});

test("a decision is small and says why: held until, dropped as a duplicate, acted on", () => {
  const until = "2026-01-06T07:00:00Z";
  const held = decisionSummary({ decision: "hold", reason: "quiet_hours", until });
  assert.equal(held.text, `Waiting (quiet hours until ${formatTime(until)})`);
  assert.equal(held.variant, "decision");
  assert.equal(decisionSummary({ decision: "drop", reason: "duplicate" }).text, "Skipped (the same came in just before)");
  // The detail is for the logs: the row says the reason in its own words.
  assert.equal(decisionSummary({ decision: "drop", reason: "late", detail: "late by 7200 s (grace 60 s)" }).text, "Skipped (it came too late, and the reminder says to skip it then)");
  assert.equal(decisionSummary({ decision: "act", reason: "urgent", detail: "woke the agent with 1 signal(s)" }).text, "Acting (it is urgent)");
  assert.equal(decisionSummary({ decision: "act", reason: "ready", detail: "woke the agent; held before: wake_gap" }).text, "Acting");
  assert.equal(decisionSummary({ decision: "coalesce", reason: "coalesced" }).text, "Handled together (with a related signal)");
  assert.equal(innerSummary({ kind: "inner.decision", payload: { decision: "hold", reason: "mid_turn" } }).text, "Waiting (for your turn to end)");
});

// Every reason services/inner-plane writes (attention.py, budget.py, runtime/spend.py).
const INNER_PLANE_REASONS = {
  act: ["ready", "urgent"],
  coalesce: ["coalesced"],
  hold: ["quiet_hours", "budget", "wake_gap", "budget_usd", "runaway", "owner_mid_turn"],
  drop: ["duplicate", "expired", "late"],
};

test("every decision reason the inner plane writes reads as words; an unknown one never shows raw", () => {
  const until = "2026-01-06T07:00:00Z";
  for (const [decision, reasons] of Object.entries(INNER_PLANE_REASONS)) {
    for (const reason of reasons) {
      const { text } = decisionSummary({ decision, reason, detail: `held before: ${reason}`, until: decision === "hold" ? until : null });
      assert.ok(!text.includes("_") && !text.includes(`(${reason}`) && !text.includes("held"), `${decision}/${reason}: ${text}`);
      // Its own words, not the generic phrase an unknown reason gets ("ready" needs none).
      const generic = decisionSummary({ decision, reason: "unknown_reason", until: decision === "hold" ? until : null }).text;
      if (reason !== "ready") assert.notEqual(text, generic, `${decision}/${reason}`);
      assert.match(text, /^(Acting|Handled together|Waiting|Skipped)\b/, `${decision}/${reason}: ${text}`);
    }
  }
  assert.equal(decisionSummary({ decision: "hold", reason: "quiet_hours", until }).text, `Waiting (quiet hours until ${formatTime(until)})`);
  assert.equal(decisionSummary({ decision: "hold", reason: "budget", until }).text, `Waiting (today's interruptions are used up, until ${formatTime(until)})`);
  assert.equal(decisionSummary({ decision: "act", reason: "due" }).text, "Acting");
  assert.equal(decisionSummary({ decision: "hold", reason: "some_new_gate" }).text, "Waiting (for the right moment)");
  assert.equal(decisionSummary({ decision: "defer_maybe", reason: "x_y" }).text, "Decided what to do about it");
});

test("activation outcomes: nothing to do is an outcome, with its reason; where the answer went", () => {
  const s = (payload) => innerSummary({ kind: "activation.outcome", payload });
  assert.deepEqual([s({ status: "completed", summary: "sent a reminder" }).text, s({ status: "completed" }).tone], ["completed · sent a reminder", "ok"]);
  const quiet = s({ status: "nothing_to_do", reason: "the backup already recovered" });
  assert.deepEqual([quiet.text, quiet.tone], ["nothing to do · the backup already recovered", ""]);
  assert.equal(s({ status: "failed", reason: "model unavailable" }).tone, "warn");
  assert.equal(s({ status: "completed", summary: "texted you", reply_channel: "sms" }).text, "completed · texted you · answered by SMS");
});

test("reminder events read as reminders; the cancel row borrows the text the page looked up", () => {
  const set = innerSummary({ kind: "reminder.set", payload: { reminder_id: "r1", revision: 1, spec: { text: "Stretch", at: "2026-01-05T09:10:00Z" } } });
  assert.deepEqual([set.label, set.text], ["Reminder set", `Stretch · ${formatTime("2026-01-05T09:10:00Z")}`]);
  const changed = innerSummary({ kind: "reminder.changed", payload: { reminder_id: "r1", revision: 2, spec: { text: "Standup", rrule: "FREQ=DAILY;BYHOUR=9" } } });
  assert.deepEqual([changed.label, changed.text], ["Reminder changed", "Standup · every day at 09:00"]);
  const cron = innerSummary({ kind: "reminder.set", payload: { reminder_id: "r2", revision: 1, spec: { text: "Bins", cron: "0 19 * * 2" } } });
  assert.equal(cron.text, "Bins · cron 0 19 * * 2");
  const cancelled = { kind: "reminder.cancelled", payload: { reminder_id: "r1", reason: "cancelled in the browser" } };
  assert.equal(innerSummary(cancelled, { text: "Stretch" }).text, "Stretch · cancelled in the browser");
  assert.equal(innerSummary(cancelled).text, "cancelled in the browser");
});

test("the new kinds are inner activity; between spans a signal is a row, a decision folds", () => {
  for (const kind of ["inner.decision", "reminder.set", "reminder.changed", "reminder.cancelled"]) assert.ok(isInnerKind(kind), kind);
  assert.ok(!isHiddenKind("reminder.set") && !isHiddenKind("inner.decision"));
  const tl = createTimeline();
  const sig = signalEvent("reminder.due", { reminder_id: "r1", text: "Stretch", due_at: "2026-01-05T09:00:00Z" });
  const decision = ev("inner.decision", { span_id: null, channel: "inner", parent_id: sig.id, payload: { decision: "act", reason: "due" } });
  addEvents(tl, [sig, decision]);
  const view = buildView(tl);
  // Between spans the signal is a row; the decision is bookkeeping, folded into a line of its own.
  assert.deepEqual(view.map((b) => b.type), ["event", "activity"]);
  assert.equal(view[0].event.kind, "inner.signal");
  assert.deepEqual(view[1].events.map((e) => e.kind), ["inner.decision"]);
  assert.equal(decisionSummary({ decision: "hold", reason: "wake_gap" }).text, "Waiting (too soon after the last one)");
  // Inside a turn they fold into its activity line, in plain words.
  assert.equal(activitySummary([sig, decision, { ...decision, id: "d2" }]), "3 background steps: signal, 2 decisions");
});

test("signal rows are built from text nodes only: hostile text stays text", () => {
  globalThis.document = fakeDocument();
  try {
    const hostile = '<img src=x onerror="alert(1)"> & <b>bold</b>';
    const sig = signalEvent("script", { text: hostile }, { source: "<script>evil()</script>" });
    const node = innerNode(sig, null);
    assert.equal(node.className, "inner inner-signal");
    assert.equal(node.getAttribute("data-signal-kind"), "script");
    // Attribute values are set with setAttribute (never parsed); the serialiser escapes text only.
    const tags = (n) => elements(n).map((el) => el.tagName);
    assert.ok(!tags(node).some((t) => ["IMG", "SCRIPT", "B"].includes(t)), tags(node).join());
    assert.ok(node.textContent.includes(hostile) && node.textContent.includes("<script>evil()</script>"));
    assert.ok(serialize(node).includes("&lt;img src=x"));
    const decision = innerNode({ id: "d1", kind: "inner.decision", ts: "2026-01-05T09:00:00Z", payload: { decision: "drop", reason: "x", detail: hostile } }, null);
    assert.match(decision.className, /inner-decision/);
    assert.ok(!tags(decision).includes("IMG") && decision.textContent.includes(hostile));
    const due = innerNode(signalEvent("reminder.due", { reminder_id: "r1", text: hostile, due_at: "2026-01-05T09:00:00Z", late_by_s: 600, grace_s: 60 }), null);
    assert.match(due.className, /inner-reminder-due tone-warn/);
    assert.ok(due.textContent.includes("late by 10 min"));
    assert.ok(!tags(due).includes("IMG") && due.textContent.includes(hostile));
  } finally {
    delete globalThis.document;
  }
});
