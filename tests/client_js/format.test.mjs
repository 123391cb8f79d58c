import assert from "node:assert/strict";
import { test } from "node:test";

import { channelInfo, formatPercent, formatRange, formatTime } from "../../client/js/format.js";
import { innerDetail, innerSummary } from "../../client/js/inner-words.js";

test("every channel has a label", () => {
  assert.deepEqual(
    ["text", "browser_voice", "phone", "sms", "email", "inner"].map((c) => channelInfo(c).label),
    ["Text", "Browser voice", "Phone", "SMS", "Email", "Inner"],
  );
  assert.equal(channelInfo("pigeon").label, "pigeon");
});

test("percentages stay honest at the edges", () => {
  assert.equal(formatPercent(0), "0%");
  assert.equal(formatPercent(0.2), "<1%");
  assert.equal(formatPercent(61.6), "62%");
  assert.equal(formatPercent(NaN), "–");
});

test("inner summaries read as activity, not speech", () => {
  const s = (kind, payload, ts) => innerSummary({ kind, payload, ts });
  assert.equal(s("context.usage", { input_tokens: 12000, compact_threshold: 200000 }).text, "12,000 tokens · 6% full");
  assert.match(s("context.compacted", { trigger: "manual", input_tokens_before: 9000, input_tokens_after: 1200 }).text, /on request · 9,000 → 1,200/);
  // The "before" figure from the usage rows wins over the payload's own.
  assert.match(innerSummary({ kind: "context.compacted", payload: { trigger: "auto", input_tokens_before: 9000, input_tokens_after: 1200 } }, { before: 8800 }).text, /8,800 → 1,200/);
  assert.equal(s("context.capsule", { text: "SECRET CAPSULE" }).text.includes("SECRET"), false);
  assert.equal(s("memory.retrieved", { query: "tea", items: [{}, {}] }).text, "2 items for “tea”");
  assert.equal(s("memory.fact.added", { text: "Lives in Porto", supersedes: ["f1"] }).text, "Lives in Porto · replaces an earlier fact");
  assert.equal(s("memory.fact.forgotten", { fact_id: "f1", reason: "SECRET" }).text.includes("SECRET"), false);
  assert.match(s("memory.extracted", { summary: "Talked about the trip.", items: [{}] }).text, /^Talked about the trip\. · 1 fact/);
  assert.equal(s("import.finished", { status: "failed", message: "3 bad lines" }).tone, "warn");
  assert.equal(s("tool.call", { name: "notes", arguments: { q: "x" } }).text, "Notes: x");
  // Plain words for the owner, local time for a reminder, never `set_reminder(text: …)`.
  const ts = "2026-01-05T09:00:00.000000Z";
  const call = s("tool.call", { name: "set_reminder", arguments: { text: "stretch", in_seconds: 300 } }, ts);
  assert.equal(call.text, `Set a reminder: stretch at ${formatTime("2026-01-05T09:05:00.000Z")}`);
  assert.equal(s("tool.call", { name: "send_sms_to_owner", arguments: { text: "hi" } }).text, "Text you: hi");
  assert.equal(s("tool.call", { name: "hotels.book", arguments: { name: "Casa", nights: 3 } }).text, "Hotels book: Casa, 3");
  assert.equal(s("tool.result", { name: "notes", ok: false, error_code: "timeout" }).tone, "warn");
  assert.equal(s("task.created", { task_id: "t1" }).label, "Task created");
  // A kind this client has no words for is never shown raw.
  assert.equal(s("something.new", {}).label, "Background step");
  assert.equal(s("thoughtflow.artifact", {}).label, "Run picture");
  // The address book's changes read as such (issue #30), never as a bare background step.
  assert.deepEqual(s("person.imported", { name: "Ana Costa" }), { label: "Contact imported", text: "Ana Costa", tone: "" });
  assert.equal(s("person.unlisted", { contact_uid: "u1" }).label, "Contact removed");
  assert.equal(s("contacts.synced", { imported: 1, unlisted: 2, birthdays: 1 }).text, "1 contact read · 2 removed · 1 with a birthday");
});

test("calls read as calls: who, how long, and why one ended early", () => {
  const s = (kind, payload) => innerSummary({ kind, payload });
  assert.equal(s("session.started", { type: "phone", caller: "+15550001111" }).text, "started · +15550001111");
  assert.equal(s("session.started", { type: "phone", direction: "outbound" }).label, "Calling you");
  assert.equal(s("session.started", { type: "voice" }).label, "Voice call");
  const ended = s("session.ended", { type: "phone", reason: "caller_hangup", duration_s: 75.4 });
  assert.equal(ended.text, "ended · 1 min 15 s");
  assert.equal(ended.tone, "");
  const dropped = s("session.ended", { type: "voice", reason: "realtime_lost", duration_s: 9 });
  assert.equal(dropped.text, "ended: the model's connection dropped · 9 s");
  assert.equal(dropped.tone, "warn");
  assert.equal(s("voice.timing", { speech_stopped_to_first_audio_ms: 412.6 }).text, "answer started after 413 ms");
  assert.equal(s("voice.timing", { start_to_first_audio_ms: 80 }).text, "greeting started after 80 ms");
});

test("a call to the owner says why it was placed, and what happened when nobody picked up", () => {
  const s = (kind, payload) => innerSummary({ kind, payload });
  const placed = s("call.placed", { call_sid: "CA1", reason: "The nightly build failed.", voicemail: "Hello…" });
  assert.deepEqual([placed.label, placed.text], ["Called you", "The nightly build failed."]);
  const left = s("call.voicemail", { action: "spoken", answered_by: "machine_end_beep",
    text: "Hello, this is your assistant. I called because: The nightly build failed." });
  assert.equal(left.label, "Voicemail left");
  assert.match(left.text, /^Hello, this is your assistant\. I called because: The nightly build/);
  const hung = s("call.voicemail", { action: "hung_up", answered_by: "machine_start",
    text: "I called you and reached your voicemail. The nightly build failed." });
  assert.equal(hung.label, "Machine answered");
  assert.match(hung.text, /^hung up; texted you: I called you and reached your voicemail/);
  // Twilio's final status of a call nobody answered, not a plain "ended".
  const missed = s("session.ended", { type: "phone", reason: "hangup", detail: "no-answer", duration_s: 64 });
  assert.deepEqual([missed.text, missed.tone], ["ended: not answered · 1 min 4 s", "warn"]);
  assert.equal(s("session.ended", { type: "phone", reason: "hangup", detail: "busy" }).text, "ended: the line was busy");
  assert.equal(s("session.ended", { type: "phone", reason: "hangup", detail: "completed" }).text, "ended");
  assert.equal(s("session.ended", { type: "phone", reason: "hangup", detail: "constructor" }).text, "ended");
});

test("capsule text appears only in the expanded detail, preformatted", () => {
  const rows = innerDetail({ kind: "context.capsule", payload: { text: "Facts: likes tea", reason: "compaction", through_seq: 9 } });
  const capsule = rows.find((r) => r[0] === "Capsule");
  assert.equal(capsule[1], "Facts: likes tea");
  assert.deepEqual(capsule[2], { pre: true });
  const generic = innerDetail({ kind: "tool.call", payload: { name: "x", arguments: { a: 1 }, agent: "" } });
  assert.deepEqual(generic.map((r) => r[0]), ["name", "arguments"]);
});

test("time ranges collapse when short", () => {
  const now = new Date("2026-01-05T12:00:00Z");
  const one = formatRange("2026-01-05T09:00:00Z", "2026-01-05T09:00:30Z", now);
  assert.ok(!one.includes("–"));
  const two = formatRange("2026-01-05T09:00:00Z", "2026-01-05T09:30:00Z", now);
  assert.ok(two.includes("–"));
  assert.equal(formatRange("garbage", null, now), "");
});

test("a budget notice says which line, the figures and until when background work waits", () => {
  const n = innerSummary({ kind: "budget.notice", payload: { reason: "budget_usd", detail: "spent $5.0000 of the daily budget $4.0000 (UTC)", until: "2026-12-07T00:00:00Z" } });
  assert.equal(n.label, "Spend limit reached");
  assert.equal(n.tone, "warn");
  assert.match(n.text, /^spent \$5\.0000 of the daily budget \$4\.0000 \(UTC\) · background work waits until /);
  assert.equal(innerSummary({ kind: "budget.notice", payload: { reason: "runaway", detail: "9 background model calls within a minute" } }).label, "Runaway guard");
});
