// The Tasks panel's data, its live log over SSE and its rows, and a task's card on the timeline:
// what shows, which controls a state allows, how each event reads, and that a task's words stay
// words (never markup).
import assert from "node:assert/strict";
import { test } from "node:test";

import { HttpError } from "../../client/js/api.js";
import { createTimeline, mergePage, addPending } from "../../client/js/timeline.js";
import { buildView } from "../../client/js/timeline-view.js";
import { taskCardNode, taskFromEvents, updateTaskCard } from "../../client/js/task-card.js";
import { TaskStream, addTaskMessage, argText, createTaskLog, eventLine, streamStatusText } from "../../client/js/task-log.js";
import { logLineNode, screenshotList, screenshotNode, taskRow } from "../../client/js/task-rows.js";
import { budgetText, diagramAfter, outcome, refreshesTasks, runPicture, taskActions, taskBody, taskFrom, taskProgress, tasksFrom } from "../../client/js/tasks.js";
import { taskErrorText } from "../../client/js/tasks-ui.js";
import { elements, fakeDocument } from "./fakedom.mjs";
import { ev, spanOpened, userMsg } from "./helpers.mjs";

const NOW = new Date("2026-01-05T09:00:00Z");
const HOSTILE = '<img src=x onerror="alert(1)"> Compare <b>cafés</b> <script>alert(2)</script>';

function task(id, state, fields = {}) {
  return {
    id,
    goal: `goal of ${id}`,
    state,
    created_at: "2026-01-05T08:00:00Z",
    updated_at: "2026-01-05T08:30:00Z",
    source: "owner",
    start_urls: [],
    budget: { steps: 40, seconds: 1800, tokens: 400000 },
    allow_tools: [],
    steps: 3,
    tokens: 1200,
    answer: null,
    error: null,
    fail_reason: null,
    screenshots: [],
    unknown_steps: [],
    refused: 0,
    run_id: `run-${id}`,
    last_seq: 10,
    ...fields,
  };
}

/** A ledger event of task `id`, as the SSE stream and /chat carry it. */
function taskEvent(kind, id, data = {}, fields = {}) {
  return ev(kind, { span_id: id, channel: "inner", ...fields, payload: { task_id: id, data } });
}

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

function withDocument(fn) {
  globalThis.document = listeningDocument();
  try {
    return fn();
  } finally {
    delete globalThis.document;
  }
}

const byClass = (root, cls) => elements(root).find((el) => el.className.split(" ").includes(cls));
const allByClass = (root, cls) => elements(root).filter((el) => el.className.split(" ").includes(cls));
const noMarkup = (root) => !elements(root).some((el) => ["IMG", "B", "SCRIPT"].includes(el.tagName));

test("the answer's tasks: newest first as sent, every list and count in place, anything malformed left out", () => {
  const body = { tasks: [task("b", "running"), { goal: "no id" }, null, { id: "a", state: "done" }] };
  const list = tasksFrom(body);
  assert.deepEqual(list.map((t) => t.id), ["b", "a"]);
  const bare = list[1];
  assert.deepEqual([bare.goal, bare.steps, bare.refused, bare.screenshots, bare.unknown_steps, bare.run_id], ["", 0, 0, [], [], null]);
  assert.deepEqual(tasksFrom([task("c", "queued")]).map((t) => t.id), ["c"], "a bare list is read too");
  assert.deepEqual(tasksFrom(null), []);
  assert.equal(taskFrom(task("d", "paused")).state, "paused");
  assert.equal(taskFrom({ task: task("e", "done") }).id, "e");
  assert.equal(taskFrom({ id: "f", state: "queued" }).goal, "", "a create may answer only {id, state}");
  assert.equal(taskFrom({ error: { code: "x" } }), null);
});

test("controls per state: pause while queued or running, resume while paused, cancel until it ends", () => {
  const table = Object.fromEntries(["queued", "running", "paused", "done", "failed", "cancelled"].map((s) => [s, taskActions(s)]));
  assert.deepEqual(table, {
    queued: { pause: true, resume: false, cancel: true },
    running: { pause: true, resume: false, cancel: true },
    paused: { pause: false, resume: true, cancel: true },
    done: { pause: false, resume: false, cancel: false },
    failed: { pause: false, resume: false, cancel: false },
    cancelled: { pause: false, resume: false, cancel: false },
  });
});

test("progress is steps of the step budget; the budget reads in words", () => {
  assert.deepEqual(taskProgress(task("a", "running", { steps: 3 })), { steps: 3, of: 40, fraction: 3 / 40, text: "3 / 40 steps" });
  assert.equal(taskProgress(task("a", "running", { steps: 1, budget: {} })).text, "1 step");
  assert.equal(taskProgress(task("a", "running", { steps: 50, budget: { steps: 40 } })).fraction, 1);
  assert.equal(budgetText({ steps: 40, seconds: 1800, tokens: 400000 }), "40 steps, 30 min, 400,000 tokens");
  assert.equal(budgetText({ seconds: 7200 }), "2 h");
  assert.equal(budgetText(null), "");
});

test("the form: goal required, start URLs one per line, an optional step budget, tools comma-separated", () => {
  assert.deepEqual(taskBody({ goal: "  Find three quiet cafés  " }), { body: { goal: "Find three quiet cafés" } });
  assert.deepEqual(
    taskBody({ goal: "Compare", urls: " https://a.example/x \n\nhttp://b.example\n", steps: " 12 ", tools: "send_email, , send_email,calendar.add" }),
    { body: { goal: "Compare", start_urls: ["https://a.example/x", "http://b.example"], budget: { steps: 12 }, allow_tools: ["send_email", "calendar.add"] } },
  );
  assert.equal(taskBody({ goal: "   " }).field, "goal");
  assert.equal(taskBody({ goal: "x".repeat(4001) }).field, "goal");
  const bad = taskBody({ goal: "g", urls: "https://ok.example\njavascript:alert(1)" });
  assert.equal(bad.field, "urls");
  assert.match(bad.error, /javascript:alert\(1\)/);
  assert.equal(taskBody({ goal: "g", urls: Array.from({ length: 11 }, (_, i) => `https://e${i}.example`).join("\n") }).field, "urls");
  for (const steps of ["0", "1.5", "abc", "1001", "-3"]) assert.equal(taskBody({ goal: "g", steps }).field, "steps", steps);
  assert.equal(taskBody({ goal: "g", tools: "rm -rf" }).field, "tools");
});

test("each step one readable line: tool steps with their argument, result and time", () => {
  const tool = eventLine(taskEvent("task.step", "t1", { step: 3, type: "tool", call_id: "c3", name: "browser_open", arguments: { url: "https://cafes.example/list" }, ok: true, output: "Page text…", ms: 412, side_effect: false }, { seq: 17 }));
  assert.equal(tool.text, "Step 3 · browser_open https://cafes.example/list · ok · 412 ms");
  assert.equal(tool.seq, 17);
  assert.equal(tool.step, 3);
  assert.equal(tool.output, "Page text…");
  assert.equal(tool.flag, false);
  const failed = eventLine(taskEvent("task.step", "t1", { step: 4, type: "tool", name: "browser_click", arguments: '{"selector":"#more"}', ok: false, output: { error: "no such element" }, ms: 1503.4, side_effect: true }));
  assert.equal(failed.text, "Step 4 · browser_click #more · failed · 1,503 ms · side effect");
  assert.equal(failed.tone, "warn");
  assert.match(failed.output, /no such element/);
  const model = eventLine(taskEvent("task.step", "t1", { step: 2, type: "model", response_id: "resp_1", calls: [{ call_id: "c3", name: "browser_open", arguments: '{"url":"https://cafes.example/list"}' }], text: "Looking at the list first.", tokens: 1234 }));
  assert.equal(model.text, "Step 2 · model asks for browser_open https://cafes.example/list · 1,234 tokens");
  assert.equal(model.detail, "Looking at the list first.");
  assert.equal(eventLine(taskEvent("task.step", "t1", { step: 9, type: "model", calls: [], text: "", tokens: 10 })).text, "Step 9 · model answers · 10 tokens");
  assert.equal(argText({ a: 1 }), '{"a":1}');
  assert.equal(argText("not json"), "not json");
  assert.equal(argText({}), "");
});

test("refusals and unknown outcomes are flagged; lifecycle lines say who; the end carries the answer or the failure", () => {
  const refused = eventLine(taskEvent("task.refused", "t1", { step: 5, call_id: "c5", name: "send_email", reason: "not allowed for this task" }));
  assert.deepEqual([refused.text, refused.detail, refused.tone, refused.flag], ["Step 5 · refused send_email", "not allowed for this task", "warn", true]);
  const unknown = eventLine(taskEvent("task.step.unknown", "t1", { step: 6, call_id: "c6", name: "send_email", key: "t1:6", reason: "no result after a restart" }));
  assert.equal(unknown.text, "Step 6 · send_email · outcome unknown: check by hand whether it happened");
  assert.deepEqual([unknown.tone, unknown.flag], ["bad", true]);
  assert.equal(eventLine(taskEvent("task.step.intent", "t1", { step: 6, name: "send_email", arguments: { to: "a@example.org" } })).text, "Step 6 · about to run send_email a@example.org · side effect");
  assert.equal(eventLine(taskEvent("task.created", "t1", { goal: "Find cafés", source: "agent", allow_tools: ["send_email"] })).text, "Created by Delegate: Find cafés");
  assert.equal(eventLine(taskEvent("task.started", "t1", { attempt: 1 })).text, "Started");
  assert.equal(eventLine(taskEvent("task.started", "t1", { attempt: 2 })).text, "Started again (attempt 2)");
  assert.equal(eventLine(taskEvent("task.paused", "t1", { by: "owner" })).text, "Paused by you");
  assert.equal(eventLine(taskEvent("task.resumed", "t1", { by: "agent" })).text, "Resumed by Delegate");
  const cancelled = eventLine(taskEvent("task.cancelled", "t1", { by: "owner" }));
  assert.deepEqual([cancelled.text, cancelled.final], ["Cancelled by you", true]);
  const done = eventLine(taskEvent("task.finished", "t1", { answer: HOSTILE }));
  assert.deepEqual([done.text, done.detail, done.tone, done.final], ["Finished", HOSTILE, "ok", true]);
  const failed = eventLine(taskEvent("task.failed", "t1", { reason: "steps", error: "40 steps used" }));
  assert.deepEqual([failed.text, failed.detail, failed.tone, failed.final], ["Failed: it used up its step budget", "40 steps used", "bad", true]);
  const shot = eventLine(taskEvent("task.screenshot", "t1", { step: 3, file: "step-3.png", url: "https://cafes.example/list" }));
  assert.deepEqual([shot.text, shot.file, shot.url], ["Step 3 · screenshot of https://cafes.example/list", "step-3.png", "https://cafes.example/list"]);
  assert.equal(eventLine(spanOpened("task", { span_id: "t1" })), null, "the span's opening is not a line");
  assert.equal(eventLine(ev("span.closed", { span_id: "t1" })), null);
  assert.equal(eventLine(taskEvent("task.something.new", "t1")).text, "something.new");
});

test("SSE messages become the log: JSON data, once each, this task only; a gap is said, never hidden", () => {
  const log = createTaskLog("t1");
  const msg = (e) => [JSON.stringify(e), String(e.seq)];
  const created = taskEvent("task.created", "t1", { goal: "Find cafés" }, { seq: 10 });
  const opened = { ...spanOpened("task", { span_id: "t1", seq: 9 }), payload: { type: "task" } };
  assert.equal(addTaskMessage(log, "task", ...msg(opened)), null);
  assert.equal(addTaskMessage(log, "task", ...msg(created)).text, "Created by you: Find cafés");
  assert.equal(log.state, "queued");
  assert.equal(addTaskMessage(log, "task", ...msg(created)), null, "a repeat by id");
  assert.equal(addTaskMessage(log, "task", JSON.stringify({ ...created, id: "other-id" }), "10"), null, "a repeat by seq");
  assert.equal(addTaskMessage(log, "task", ...msg(taskEvent("task.started", "t2", {}, { seq: 11 }))), null, "another task's event");
  addTaskMessage(log, "task", ...msg(taskEvent("task.started", "t1", { attempt: 1 }, { seq: 12 })));
  assert.equal(log.state, "running");
  const gap = addTaskMessage(log, "gap", JSON.stringify({ after_seq: 12, reason: "ledger unavailable" }), "");
  assert.equal(gap.kind, "gap");
  assert.equal(gap.text, "Events after #12 could not be loaded (ledger unavailable): steps may be missing here.");
  assert.deepEqual([gap.tone, gap.flag], ["bad", true]);
  assert.equal(addTaskMessage(log, "gap", "{}", "").text, "Some events could not be loaded: steps may be missing here.");
  assert.equal(addTaskMessage(log, "task", "not json", "13"), null);
  assert.equal(log.badMessages, 1);
  addTaskMessage(log, "task", ...msg(taskEvent("task.screenshot", "t1", { step: 3, file: "s3.png", url: "https://x.example" }, { seq: 14 })));
  const noSeq = { ...taskEvent("task.step", "t1", { step: 4, type: "tool", name: "browser_open", ok: true, ms: 5 }), seq: undefined };
  assert.equal(addTaskMessage(log, "task", JSON.stringify(noSeq), "15").seq, 15, "the SSE id stands in for a missing seq");
  assert.equal(log.ended, false);
  addTaskMessage(log, "task", ...msg(taskEvent("task.finished", "t1", { answer: "Three cafés." }, { seq: 16 })));
  assert.deepEqual([log.state, log.ended, log.lastSeq], ["done", true, 16]);
  assert.deepEqual(log.shots, [{ file: "s3.png", step: 3, url: "https://x.example" }]);
  assert.deepEqual(
    log.lines.map((l) => l.kind),
    ["task.created", "task.started", "gap", "gap", "task.screenshot", "task.step", "task.finished"],
  );
});

class FakeEventSource {
  static last = null;
  constructor(url) {
    this.url = url;
    this.readyState = 0;
    this.listeners = {};
    this.closed = false;
    FakeEventSource.last = this;
  }
  addEventListener(type, fn) {
    (this.listeners[type] ||= []).push(fn);
  }
  emit(type, data = undefined, lastEventId = "") {
    for (const fn of this.listeners[type] || []) fn({ type, data, lastEventId });
  }
  close() {
    this.closed = true;
    this.readyState = 2;
  }
}

test("the live stream: EventSource on the task's events, statuses in words, closed once the task has ended", () => {
  const lines = [];
  const statuses = [];
  const stream = new TaskStream("t/1", { EventSourceImpl: FakeEventSource, onLine: (l) => lines.push(l.text), onStatus: (s) => statuses.push(s) });
  stream.start();
  const es = FakeEventSource.last;
  assert.equal(es.url, "/api/tasks/t%2F1/events");
  es.readyState = 1;
  es.emit("open");
  es.emit("task", JSON.stringify(taskEvent("task.step", "t/1", { step: 1, type: "tool", name: "browser_open", arguments: { url: "https://a.example" }, ok: true, ms: 40 }, { seq: 5 })), "5");
  es.readyState = 0;
  es.emit("error"); // dropped: the browser reconnects with Last-Event-ID by itself
  es.readyState = 1;
  es.emit("open");
  es.emit("gap", JSON.stringify({ after_seq: 5, reason: "trimmed" }));
  es.emit("message", JSON.stringify(taskEvent("task.refused", "t/1", { step: 2, name: "send_email", reason: "not allowed" }, { seq: 7 })), "7");
  es.emit("task", JSON.stringify(taskEvent("task.cancelled", "t/1", { by: "owner" }, { seq: 8 })), "8");
  assert.equal(es.closed, true, "an ended task's stream is closed, not reopened forever");
  es.emit("task", JSON.stringify(taskEvent("task.step", "t/1", { step: 9 }, { seq: 9 })), "9");
  assert.deepEqual(lines, [
    "Step 1 · browser_open https://a.example · ok · 40 ms",
    "Events after #5 could not be loaded (trimmed): steps may be missing here.",
    "Step 2 · refused send_email",
    "Cancelled by you",
  ]);
  assert.deepEqual(statuses, ["connecting", "live", "reconnecting", "live", "ended"]);
  assert.equal(streamStatusText("reconnecting"), "The live log dropped: reconnecting…");

  // Refused by the server (401, 404): closed for good, said so.
  const refused = new TaskStream("t2", { EventSourceImpl: FakeEventSource, onStatus: (s) => statuses.push(s) });
  refused.start();
  FakeEventSource.last.readyState = 2;
  FakeEventSource.last.emit("error");
  assert.equal(refused.status, "closed");
  refused.stop();
  assert.equal(refused.status, "stopped");

  // The server's `end` (the span closed) ends it too, even when no final line was read (a gap).
  const gapped = new TaskStream("t3", { EventSourceImpl: FakeEventSource });
  gapped.start();
  const es3 = FakeEventSource.last;
  es3.emit("gap", JSON.stringify({ after_seq: 3, reason: "lost" }));
  es3.emit("end", '{"reason":"the task ended"}');
  assert.deepEqual([es3.closed, gapped.status], [true, "ended"]);
});

test("a task row: goal as text, state and progress, Pause / Resume / Cancel enabled per state", () => {
  withDocument(() => {
    const calls = [];
    const on = Object.fromEntries(["select", "pause", "resume", "confirm", "cancel", "keep"].map((n) => [n, (t) => calls.push([n, t.id])]));
    const row = taskRow(task("t1", "running", { goal: HOSTILE, steps: 3, refused: 2, unknown_steps: [4] }), { now: NOW, on, selected: true });
    assert.equal(row.getAttribute("data-task-id"), "t1");
    assert.equal(row.getAttribute("data-state"), "running");
    assert.equal(row.getAttribute("aria-current"), "true");
    assert.equal(byClass(row, "task-goal").textContent, HOSTILE);
    assert.ok(noMarkup(row), "no element from the goal's words");
    assert.equal(byClass(row, "task-badge").textContent, "Running");
    assert.equal(byClass(row, "task-progress-text").textContent, "3 / 40 steps");
    assert.match(byClass(row, "task-when").textContent, /2 refused · 1 to check$/);
    const state = (r) => ["task-pause", "task-resume", "task-cancel"].map((c) => byClass(r, c).getAttribute("disabled") === null);
    assert.deepEqual(state(row), [true, false, true]);
    assert.deepEqual(state(taskRow(task("q", "queued"), { now: NOW })), [true, false, true]);
    assert.deepEqual(state(taskRow(task("p", "paused"), { now: NOW })), [false, true, true]);
    for (const s of ["done", "failed", "cancelled"]) assert.equal(byClass(taskRow(task("x", s), { now: NOW }), "task-actions"), undefined, `${s}: nothing to do`);
    assert.ok(byClass(row, "task-pause").getAttribute("aria-label").startsWith("Pause task: <img src=x"));
    byClass(row, "task-select").listeners.click();
    byClass(row, "task-pause").listeners.click();
    byClass(row, "task-cancel").listeners.click();
    // Cancel asks first, inline.
    const confirm = taskRow(task("t1", "paused"), { now: NOW, on, mode: "confirm" });
    assert.equal(byClass(confirm, "task-confirm-text").textContent, "Cancel this task? It stops for good.");
    byClass(confirm, "task-cancel-yes").listeners.click();
    byClass(confirm, "task-cancel-no").listeners.click();
    assert.deepEqual(calls, [["select", "t1"], ["pause", "t1"], ["confirm", "t1"], ["cancel", "t1"], ["keep", "t1"]]);
    // Busy: the pressed one says so and nothing else can be pressed; an error shows under the row.
    const busy = taskRow(task("t1", "running"), { now: NOW, busy: "pause", error: "Could not pause the task: it has ended." });
    assert.equal(byClass(busy, "task-pause").textContent, "Pausing…");
    assert.deepEqual(state(busy), [false, false, false]);
    assert.equal(byClass(busy, "task-error").getAttribute("role"), "alert");
    assert.equal(byClass(busy, "task-error").textContent, "Could not pause the task: it has ended.");
  });
});

test("a log line: its words as text, refusals, unknown outcomes and gaps marked in words, tool output folded", () => {
  withDocument(() => {
    const log = createTaskLog("t1");
    const lines = [
      taskEvent("task.step", "t1", { step: 3, type: "tool", name: "browser_open", arguments: { url: "https://x.example" }, ok: true, output: HOSTILE, ms: 412 }, { seq: 3 }),
      taskEvent("task.refused", "t1", { step: 4, name: "send_email", reason: HOSTILE }, { seq: 4 }),
      taskEvent("task.step.unknown", "t1", { step: 5, name: "send_email", reason: "restart" }, { seq: 5 }),
      taskEvent("task.finished", "t1", { answer: HOSTILE }, { seq: 6 }),
    ].map((e) => addTaskMessage(log, "task", JSON.stringify(e), String(e.seq)));
    lines.splice(1, 0, addTaskMessage(log, "gap", JSON.stringify({ after_seq: 3, reason: "<i>x</i>" })));
    const nodes = lines.map(logLineNode);
    const [tool, gap, refused, unknown, done] = nodes;
    assert.equal(byClass(tool, "task-line-text").textContent, "Step 3 · browser_open https://x.example · ok · 412 ms");
    assert.equal(tool.getAttribute("data-step"), "3");
    assert.equal(tool.getAttribute("data-event-id"), lines[0].id, "search and jumps find it");
    assert.equal(elements(tool).find((e) => e.tagName === "PRE").textContent, HOSTILE);
    assert.equal(elements(tool).find((e) => e.tagName === "SUMMARY").textContent, `Output (${HOSTILE.length} characters)`);
    assert.equal(byClass(gap, "task-flag").textContent, "Gap");
    assert.ok(gap.className.includes("flagged"));
    assert.equal(byClass(refused, "task-flag").textContent, "Refused");
    assert.equal(byClass(refused, "task-line-detail").textContent, HOSTILE);
    assert.equal(byClass(unknown, "task-flag").textContent, "Check");
    assert.ok(unknown.className.includes("tone-bad"));
    assert.ok(done.className.includes("final"));
    assert.equal(byClass(done, "task-answer").textContent, HOSTILE);
    for (const n of nodes) assert.ok(noMarkup(n) && !elements(n).some((e) => e.tagName === "I"));
  });
});

test("screenshots: live ones with their step and page, the task's names after; a thumbnail opens full size", () => {
  withDocument(() => {
    const log = createTaskLog("t1");
    addTaskMessage(log, "task", JSON.stringify(taskEvent("task.screenshot", "t1", { step: 5, file: "b.png", url: "https://b.example" }, { seq: 5 })));
    addTaskMessage(log, "task", JSON.stringify(taskEvent("task.screenshot", "t1", { step: 2, file: "a.png", url: "https://a.example" }, { seq: 6 })));
    const shots = screenshotList(task("t1", "running", { screenshots: ["a.png", "b.png", "c.png"] }), log);
    assert.deepEqual(shots.map((s) => [s.file, s.step]), [["a.png", 2], ["b.png", 5], ["c.png", null]]);
    const opened = [];
    const node = screenshotNode("t 1", { file: "shot #1.png", step: 2, url: '"><script>x</script>' }, 1, { onOpen: (s, src, label) => opened.push([src, label]) });
    const img = elements(node).find((e) => e.tagName === "IMG");
    assert.equal(img.getAttribute("src"), "/api/tasks/t%201/files/shot%20%231.png");
    assert.equal(img.getAttribute("alt"), 'Screenshot 1, step 2: "><script>x</script>');
    assert.ok(!elements(node).some((e) => e.tagName === "SCRIPT"));
    byClass(node, "task-shot-btn").listeners.click();
    assert.deepEqual(opened, [["/api/tasks/t%201/files/shot%20%231.png", 'Screenshot 1, step 2: "><script>x</script>']]);
  });
});

test("the run picture: only once the task has ended; a 404 right after is still being drawn, asked again, then Retry", () => {
  assert.equal(runPicture(task("t1", "running")).show, false);
  assert.equal(runPicture(task("t1", "paused")).why, "The run picture is drawn when the task ends.");
  for (const s of ["done", "failed", "cancelled"]) assert.deepEqual(runPicture(task("t1", s)), { show: true, url: "/api/runs/run-t1/diagram", why: "" });
  assert.equal(runPicture(task("t1", "done", { run_id: null })).show, false);
  assert.deepEqual(diagramAfter(200, 1), { status: "ready", retryIn: null });
  assert.deepEqual(diagramAfter(404, 1, "not_found"), { status: "drawing", retryIn: 2000 });
  assert.deepEqual(diagramAfter(404, 2), { status: "drawing", retryIn: 3000 }, "less and less often");
  assert.deepEqual(diagramAfter(404, 9), { status: "drawing", retryIn: 10000 }, "at most every 10 s");
  assert.deepEqual(diagramAfter(503, 1), { status: "drawing", retryIn: 2000 }, "the ledger is away for a moment");
  assert.deepEqual(diagramAfter(404, 20), { status: "missing", retryIn: null }, "then Retry is offered");
  assert.deepEqual(diagramAfter(404, 1, "not_rendered"), { status: "unrendered", retryIn: null }, "a failed drawing is final");
  assert.deepEqual(diagramAfter(401, 1), { status: "signed-out", retryIn: null });
  assert.deepEqual(diagramAfter(500, 1), { status: "failed", retryIn: null });
  assert.deepEqual(diagramAfter(0, 1), { status: "failed", retryIn: null });
});

test("how a task ended, and which timeline events mean the list changed", () => {
  assert.deepEqual(outcome(task("t", "done", { answer: "Three cafés." })), { tone: "ok", label: "Answer", text: "Three cafés." });
  assert.deepEqual(outcome(task("t", "failed", { fail_reason: "seconds", error: "timeout" })), { tone: "bad", label: "Failed: it ran out of time", text: "timeout" });
  assert.equal(outcome(task("t", "running")), null);
  for (const kind of ["task.created", "task.step", "task.finished"]) assert.ok(refreshesTasks({ kind }), kind);
  assert.ok(refreshesTasks({ kind: "span.opened", payload: { type: "task" } }));
  assert.ok(!refreshesTasks({ kind: "span.opened", payload: { type: "interaction" } }));
  assert.ok(!refreshesTasks({ kind: "message" }));
  assert.ok(!refreshesTasks(null));
});

test("errors of the task routes in words: a refused transition says why", () => {
  assert.equal(taskErrorText(new HttpError(409, { error: { code: "conflict", message: "the task is running" } }), "resume the task"), "Could not resume the task: the task is running.");
  assert.equal(taskErrorText(new HttpError(409, null), "pause the task"), "Could not pause the task: not possible in the task’s state now.");
  assert.equal(taskErrorText(new HttpError(503, null), "load the tasks"), "Tasks are unavailable right now: Delegate’s task service is not answering.");
  assert.equal(taskErrorText(new HttpError(422, { error: { code: "bad_task", message: "goal: too long" } }), "start the task"), "goal: too long");
  assert.equal(taskErrorText(new Error("offline"), "start the task"), "Could not start the task: Delegate is not answering. Try again.");
});

function taskTimeline(id, goal = "Find cafés") {
  const tl = createTimeline();
  const u = userMsg("Please look into cafés", { span_id: "S", seq: 1 });
  const events = [
    spanOpened("interaction", { span_id: "S", seq: 0 }),
    u,
    { ...spanOpened("task", { span_id: id, seq: 2, channel: "inner" }) },
    taskEvent("task.created", id, { goal, source: "owner", budget: { steps: 10 } }, { seq: 3 }),
    taskEvent("task.started", id, { attempt: 1 }, { seq: 4 }),
    taskEvent("task.step", id, { step: 1, type: "model", calls: [{ name: "browser_open", arguments: { url: "https://x.example" } }], tokens: 50 }, { seq: 5 }),
    taskEvent("task.step", id, { step: 2, type: "tool", name: "browser_open", arguments: { url: "https://x.example" }, ok: true, ms: 30 }, { seq: 6 }),
    taskEvent("task.refused", id, { step: 3, name: "send_email", reason: "not allowed" }, { seq: 7 }),
  ];
  mergePage(tl, { events, cursor: null });
  return { tl, u };
}

test("the timeline: a task's span is one card keyed apart, its steps inside it; a message never lands in it", () => {
  const { tl } = taskTimeline("T1");
  addPending(tl, { client_msg_id: "c1", text: "And the weather?" });
  const view = buildView(tl);
  assert.deepEqual(view.map((b) => b.key), ["span:S", "task:T1"]);
  const card = view[1];
  assert.equal(card.task, true);
  assert.equal(card.spanType, "task");
  assert.deepEqual(card.items.map((i) => i.event.kind), ["task.created", "task.started", "task.step", "task.step", "task.refused"]);
  assert.ok(view[0].items.some((i) => i.type === "pending"), "the pending message goes to the open conversation, not the task");
  const t = taskFromEvents(card.items.map((i) => i.event), card.span_id);
  assert.deepEqual([t.id, t.goal, t.state, t.steps, t.of, t.refused], ["T1", "Find cafés", "running", 2, 10, 1]);
  // An activation span keeps its activation id (its run picture).
  const tl2 = createTimeline();
  mergePage(tl2, { events: [{ ...spanOpened("activation", { span_id: "A", seq: 1 }), payload: { type: "activation", activation_id: "act-9" } }, ev("activation.outcome", { span_id: "A", seq: 2 })], cursor: null });
  assert.equal(buildView(tl2)[0].activationId, "act-9");
});

test("a task card: Task · goal as text, state, progress, Open; the steps folded inside; the end when it comes", () => {
  withDocument(() => {
    const { tl } = taskTimeline("T1", HOSTILE);
    const opened = [];
    let block = buildView(tl)[1];
    const node = taskCardNode(block, { onOpen: (id) => opened.push(id) });
    assert.equal(node.getAttribute("data-task-id"), "T1");
    assert.equal(node.getAttribute("data-state"), "running");
    assert.equal(byClass(node, "task-card-kind").textContent, "Task");
    assert.equal(byClass(node, "task-card-goal").textContent, HOSTILE);
    assert.ok(noMarkup(node));
    assert.equal(byClass(node, "task-badge").textContent, "Running");
    assert.equal(byClass(node, "task-card-progress").textContent, "2 / 10 steps");
    assert.equal(byClass(node, "task-card-flag").textContent, "1 refused");
    const steps = byClass(node, "task-card-steps");
    assert.equal(steps.tagName, "DETAILS");
    assert.equal(steps.getAttribute("open"), null, "folded: not one row per step");
    assert.equal(elements(steps).find((e) => e.tagName === "SUMMARY").textContent, "5 events · 2 steps");
    assert.equal(allByClass(node, "task-line").length, 5);
    assert.equal(byClass(node, "task-card-end").hidden, true);
    byClass(node, "task-open").listeners.click();
    assert.deepEqual(opened, ["T1"]);
    // It finishes: the same node updates in place, the answer shows, the new line joins the rest.
    mergePage(tl, { events: [taskEvent("task.finished", "T1", { answer: "Café Lumen, Bica, Tati." }, { seq: 9 })] });
    block = buildView(tl)[1];
    updateTaskCard(node, block);
    assert.equal(node.getAttribute("data-state"), "done");
    // It had a refused step on the way: never a green "Done".
    assert.equal(byClass(node, "task-badge").textContent, "Done, 1 refused");
    assert.equal(byClass(node, "task-badge").className, "task-badge state-partial");
    assert.equal(byClass(node, "task-card-end").getAttribute("data-tone"), "warn");
    assert.equal(byClass(node, "task-card-end").hidden, false);
    assert.equal(byClass(node, "task-card-end").textContent, "Café Lumen, Bica, Tati.");
    assert.equal(allByClass(node, "task-line").length, 6);
    mergePage(tl, { events: [taskEvent("task.failed", "T1", { reason: "failures", error: "<b>boom</b>" }, { seq: 10 })] });
    updateTaskCard(node, buildView(tl)[1]);
    assert.equal(byClass(node, "task-card-end").textContent, "Failed: too many failures in a row · <b>boom</b>");
    assert.ok(noMarkup(node));
  });
});

test("a task done with refused steps is never a green Done; its answer renders markdown", async () => {
  const { outcome } = await import("../../client/js/tasks.js");
  const { stateBadge, logLineNode } = await import("../../client/js/task-rows.js");
  const { fakeDocument } = await import("./fakedom.mjs");
  assert.deepEqual(outcome({ state: "done", refused: 1, answer: "Could not open it." }), {
    tone: "warn", label: "Answer, with 1 refused step", text: "Could not open it.",
  });
  assert.equal(outcome({ state: "done", refused: 0, answer: "ok" }).tone, "ok");
  globalThis.document = fakeDocument();
  try {
    const badge = stateBadge("done", 2);
    assert.equal(badge.className, "task-badge state-partial");
    assert.equal(badge.textContent, "Done, 2 refused");
    assert.equal(stateBadge("done").className, "task-badge state-done");
    const line = logLineNode({ key: "k", id: "e1", kind: "task.finished", text: "Finished", detail: "**Trains** at 09:05", tone: "ok", final: true });
    const answer = line.childNodes[1];
    assert.ok(answer.className.includes("md"));
    assert.ok(answer.textContent.includes("Trains at 09:05"));
    assert.ok(!answer.textContent.includes("**"));
  } finally {
    delete globalThis.document;
  }
});
