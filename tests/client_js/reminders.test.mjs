// The Reminders panel's data and rows: which reminders show, in what order, how they read.
import assert from "node:assert/strict";
import { test } from "node:test";

import { formatTime } from "../../client/js/format.js";
import {
  refreshesReminders,
  relativeDue,
  reminderRow,
  reminderText,
  remindersFrom,
  repeatText,
  upcomingReminders,
} from "../../client/js/reminders.js";
import { elements, fakeDocument } from "./fakedom.mjs";
import { ev } from "./helpers.mjs";

const NOW = new Date("2026-01-05T09:00:00Z");

function reminder(id, next_due, spec = {}, fields = {}) {
  return { id, revision: 1, status: "active", next_due, fired: 0, created_at: "2026-01-04T10:00:00Z", spec: { text: `reminder ${id}`, ...spec }, ...fields };
}

test("the answer's reminders, soonest first, only the active ones", () => {
  const body = {
    reminders: [
      reminder("late", "2026-01-05T18:00:00Z"),
      reminder("soon", "2026-01-05T09:05:00Z"),
      reminder("done", "2026-01-05T08:00:00Z", {}, { status: "done" }),
      reminder("gone", "2026-01-05T09:01:00Z", {}, { status: "cancelled" }),
      reminder("none-left", null),
      { not: "a reminder" },
    ],
  };
  assert.deepEqual(upcomingReminders(remindersFrom(body)).map((r) => r.id), ["soon", "late", "none-left"]);
  assert.deepEqual(remindersFrom([reminder("a", null)]).map((r) => r.id), ["a"], "a bare list is read too");
  assert.deepEqual(remindersFrom(null), []);
});

test("how far away, and how it repeats", () => {
  assert.equal(relativeDue("2026-01-05T09:05:00Z", NOW), "in 5 min");
  assert.equal(relativeDue("2026-01-05T11:10:00Z", NOW), "in 2 h 10 min");
  assert.equal(relativeDue("2026-01-05T08:57:00Z", NOW), "overdue by 3 min");
  assert.equal(relativeDue("2026-01-05T09:00:00.300Z", NOW), "now");
  assert.equal(repeatText(reminder("a", null, { rrule: "FREQ=DAILY;BYHOUR=9" })), "every day at 09:00");
  assert.equal(repeatText(reminder("b", null, { cron: "*/15 * * * *" })), "cron */15 * * * *");
  assert.equal(repeatText(reminder("c", null, { at: "2026-01-05T10:00:00Z" })), "");
});

test("which timeline events mean the list may have changed", () => {
  for (const kind of ["reminder.set", "reminder.changed", "reminder.cancelled"]) assert.ok(refreshesReminders({ kind }), kind);
  assert.ok(refreshesReminders({ kind: "inner.signal", payload: { signal_kind: "reminder.due" } }));
  assert.ok(!refreshesReminders({ kind: "inner.signal", payload: { signal_kind: "script" } }));
  assert.ok(!refreshesReminders({ kind: "message", payload: { text: "remind me" } }));
  assert.ok(!refreshesReminders(null));
});

test("a cancelled reminder's text comes from its newest definition", () => {
  const events = [
    ev("reminder.set", { payload: { reminder_id: "r1", revision: 1, spec: { text: "Stretch" } } }),
    ev("reminder.set", { payload: { reminder_id: "r2", revision: 1, spec: { text: "Other" } } }),
    ev("reminder.changed", { payload: { reminder_id: "r1", revision: 2, spec: { text: "Stretch and drink water" } } }),
  ];
  assert.equal(reminderText(events, "r1"), "Stretch and drink water");
  assert.equal(reminderText(events, "r9"), null);
});

function listeningDocument() {
  const doc = fakeDocument();
  const make = doc.createElement;
  doc.createElement = (tag) => {
    const el = make(tag);
    el.listeners = {};
    el.addEventListener = (type, fn) => {
      el.listeners[type] = fn;
    };
    return el;
  };
  return doc;
}

test("a row: text, when, repeat, urgent, and a Cancel button that names the reminder; text stays text", () => {
  globalThis.document = listeningDocument();
  try {
    const hostile = '<img src=x onerror="alert(1)"> Pay <b>rent</b>';
    const r = reminder("r1", "2026-01-05T09:05:00Z", { text: hostile, rrule: "FREQ=MONTHLY", urgency: "urgent" }, { revision: 3 });
    const cancelled = [];
    const row = reminderRow(r, { now: NOW, onCancel: (what, button) => cancelled.push([what.id, button.tagName]) });
    assert.equal(row.getAttribute("data-reminder-id"), "r1");
    assert.equal(row.getAttribute("data-revision"), "3");
    const byClass = (cls) => elements(row).find((el) => el.className.split(" ").includes(cls));
    assert.equal(byClass("reminder-text").textContent, hostile);
    assert.equal(byClass("reminder-when").textContent, `${formatTime("2026-01-05T09:05:00Z", NOW)} · in 5 min`);
    assert.equal(byClass("reminder-when").getAttribute("datetime"), "2026-01-05T09:05:00Z");
    assert.equal(byClass("reminder-repeat").textContent, "every month");
    assert.equal(byClass("reminder-urgent").textContent, "urgent");
    const button = byClass("reminder-cancel");
    assert.equal(button.getAttribute("aria-label"), `Cancel reminder: ${hostile}`);
    button.listeners.click();
    assert.deepEqual(cancelled, [["r1", "BUTTON"]]);
    assert.ok(!elements(row).some((el) => ["IMG", "B"].includes(el.tagName)));
    const plain = reminderRow(reminder("r2", null), { now: NOW });
    assert.equal(elements(plain).find((el) => el.className === "reminder-when").textContent, "no time left");
    assert.ok(!elements(plain).some((el) => el.className === "reminder-repeat" || el.className === "reminder-urgent"));
  } finally {
    delete globalThis.document;
  }
});
