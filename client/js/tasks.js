// Durable tasks for the Tasks panel and the timeline: pure data, line and row builders, and
// the live log of one task over Server-Sent Events. No fetch here (tasks-ui.js asks the API).
//
// The tasks service runs long browser/research jobs apart from the conversation. Everything
// that happens to a task is a `task.*` ledger event in the task's own span (`span.opened` type
// "task", span id = task id), payload {task_id, data}. The gateway lists tasks at
// GET /api/tasks, streams one task's events at GET /api/tasks/{id}/events (`event: task`,
// `id: <seq>`, and `event: gap` when it cannot fill a gap), serves its screenshots at
// /api/tasks/{id}/files/{name} and its run picture at /api/runs/{run_id}/diagram (SVG).
//
// Everything a task says (goal, answer, page-derived output, errors) is untrusted: it only
// ever becomes text nodes and attribute values, never markup.

import { append, h, reconcile, setText } from "./dom.js";
import { formatNumber, formatRange, formatTime, fullTime } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { spanCost } from "./timeline.js";

export const TASK_STATES = ["queued", "running", "paused", "done", "failed", "cancelled"];
const TERMINAL = new Set(["done", "failed", "cancelled"]);
const STATE_WORDS = { queued: "Queued", running: "Running", paused: "Paused", done: "Done", failed: "Failed", cancelled: "Cancelled" };

/** Why a task failed, in words (`fail_reason` / task.failed `reason`). */
export const FAIL_WORDS = {
  steps: "it used up its step budget",
  seconds: "it ran out of time",
  tokens: "it used up its token budget",
  workdir: "its working folder grew too big",
  failures: "too many failures in a row",
  error: "an error",
};

// Form limits: the same as the service's (contracts/tasks.py), so the owner hears it here first.
export const MAX_GOAL = 4000;
export const MAX_URLS = 10;
export const MAX_TOOLS = 20;
export const MAX_STEPS = 1000;

const SEP = " · ";

function clip(text, n) {
  const one = String(text ?? "").replace(/\s+/g, " ").trim();
  return one.length > n ? `${one.slice(0, n - 1)}…` : one;
}

function str(v) {
  return typeof v === "string" ? v : "";
}

function int(v) {
  return Number.isInteger(v) ? v : null;
}

export function isTerminal(state) {
  return TERMINAL.has(state);
}

/** Queued, running or paused: a task that still counts. */
export function isActive(state) {
  return state === "queued" || state === "running" || state === "paused";
}

export function stateLabel(state) {
  return STATE_WORDS[state] || String(state || "Unknown");
}

// ---- the API's answers -------------------------------------------------------------

/** A TASK as the panel uses it: the API's object with every list and count in place. */
export function normalizeTask(t) {
  if (!t || typeof t !== "object" || typeof t.id !== "string" || !t.id) return null;
  const budget = (t.budget && typeof t.budget === "object" && t.budget) || {};
  const list = (v) => (Array.isArray(v) ? v : []);
  return {
    ...t,
    goal: str(t.goal),
    state: str(t.state) || "queued",
    source: t.source === "agent" ? "agent" : "owner",
    budget,
    start_urls: list(t.start_urls).filter((u) => typeof u === "string"),
    allow_tools: list(t.allow_tools).filter((u) => typeof u === "string"),
    screenshots: list(t.screenshots).filter((u) => typeof u === "string" && u),
    unknown_steps: list(t.unknown_steps).filter((n) => Number.isInteger(n)),
    steps: int(t.steps) ?? 0,
    tokens: int(t.tokens) ?? 0,
    refused: int(t.refused) ?? 0,
    run_id: str(t.run_id) || null,
  };
}

/** The tasks of a GET /api/tasks answer (`{"tasks": [...]}` or a bare list), newest first as sent. */
export function tasksFrom(body) {
  const list = Array.isArray(body) ? body : body && Array.isArray(body.tasks) ? body.tasks : [];
  return list.map(normalizeTask).filter(Boolean);
}

/** One TASK from GET /api/tasks/{id}, a control's answer or a create's (`{"task": …}` is read too). */
export function taskFrom(body) {
  return normalizeTask(body && typeof body === "object" && body.task && typeof body.task === "object" ? body.task : body);
}

/** Which controls a state allows (the service answers 409 to the others). */
export function taskActions(state) {
  return {
    pause: state === "queued" || state === "running",
    resume: state === "paused",
    cancel: isActive(state),
  };
}

/** {steps, of, fraction, text}: "3 / 40 steps", or "3 steps" without a step budget. */
export function taskProgress(task) {
  const steps = (task && int(task.steps)) ?? 0;
  const of = task && task.budget ? int(task.budget.steps) : null;
  const fraction = of ? Math.max(0, Math.min(1, steps / of)) : null;
  const text = of ? `${steps} / ${of} steps` : `${steps} step${steps === 1 ? "" : "s"}`;
  return { steps, of, fraction, text };
}

/** "40 steps, 30 min, 400,000 tokens": a task's limits in words. */
export function budgetText(budget) {
  const b = budget || {};
  const parts = [];
  if (Number.isFinite(b.steps)) parts.push(`${formatNumber(b.steps)} steps`);
  if (Number.isFinite(b.seconds)) {
    const s = b.seconds;
    parts.push(s >= 3600 && s % 3600 === 0 ? `${s / 3600} h` : s >= 60 ? `${Math.round(s / 60)} min` : `${s} s`);
  }
  if (Number.isFinite(b.tokens)) parts.push(`${formatNumber(b.tokens)} tokens`);
  return parts.join(", ");
}

/** What a finished task ended with: {tone, label, text} ("" text when it said nothing). */
export function outcome(task) {
  if (!task) return null;
  // Done with refused steps (a start URL the egress policy refused) is not a clean success.
  if (task.state === "done" && task.refused > 0) {
    return { tone: "warn", label: `Answer, with ${task.refused} refused step${task.refused === 1 ? "" : "s"}`, text: str(task.answer) };
  }
  if (task.state === "done") return { tone: "ok", label: "Answer", text: str(task.answer) };
  if (task.state === "failed") {
    const why = FAIL_WORDS[task.fail_reason] || "";
    return { tone: "bad", label: why ? `Failed: ${why}` : "Failed", text: str(task.error) };
  }
  if (task.state === "cancelled") return { tone: "", label: "Cancelled", text: "" };
  return null;
}

export function screenshotUrl(taskId, file) {
  return `/api/tasks/${encodeURIComponent(taskId)}/files/${encodeURIComponent(file)}`;
}

export function diagramUrl(runId) {
  return `/api/runs/${encodeURIComponent(runId)}/diagram`;
}

export function taskEventsUrl(taskId) {
  return `/api/tasks/${encodeURIComponent(taskId)}/events`;
}

/** When the run picture shows: only for an ended task with a run id. */
export function runPicture(task) {
  if (!task || !task.run_id) return { show: false, url: null, why: "This task has no run picture." };
  if (!isTerminal(task.state)) return { show: false, url: null, why: "The run picture is drawn when the task ends." };
  return { show: true, url: diagramUrl(task.run_id), why: "" };
}

/**
 * What to do after asking for the run picture: its HTTP status (and error code) → {status,
 * retryIn}. A 404 `not_found` means it is still being drawn (the task just ended; drawing can
 * take half a minute on a busy machine): ask again, less and less often, then offer Retry.
 * A 404 `not_rendered` is final: the drawing failed.
 */
export function diagramAfter(httpStatus, tries, code = null, { maxTries = 20, every = 2000, cap = 10000 } = {}) {
  if (httpStatus >= 200 && httpStatus < 300) return { status: "ready", retryIn: null };
  if (httpStatus === 401) return { status: "signed-out", retryIn: null };
  if (httpStatus === 404 && code === "not_rendered") return { status: "unrendered", retryIn: null };
  if (httpStatus === 404 || httpStatus === 503) {
    if (tries >= maxTries) return { status: "missing", retryIn: null };
    return { status: "drawing", retryIn: Math.min(cap, Math.round(every * 1.5 ** Math.max(0, tries - 1))) };
  }
  return { status: "failed", retryIn: null };
}

/** A /chat event after which the task list may have changed. */
export function refreshesTasks(ev) {
  if (!ev || typeof ev.kind !== "string") return false;
  if (ev.kind.startsWith("task.")) return true;
  return (ev.kind === "span.opened" || ev.kind === "span.closed") && !!ev.payload && ev.payload.type === "task";
}

// ---- the create form ---------------------------------------------------------------

function lines(text) {
  return String(text || "")
    .split(/\r?\n/)
    .map((s) => s.trim())
    .filter(Boolean);
}

/**
 * The POST /api/tasks body from the form's raw values, or {error, field} saying what to fix.
 * Start URLs: one per line; step budget: empty for the service's default; tools: comma-separated.
 */
export function taskBody({ goal = "", urls = "", steps = "", tools = "" } = {}) {
  const g = String(goal).trim();
  if (!g) return { error: "Say what the task should do.", field: "goal" };
  if (g.length > MAX_GOAL) return { error: `The goal is too long (at most ${formatNumber(MAX_GOAL)} characters).`, field: "goal" };
  const body = { goal: g };
  const startUrls = lines(urls);
  if (startUrls.length > MAX_URLS) return { error: `At most ${MAX_URLS} start URLs.`, field: "urls" };
  const bad = startUrls.find((u) => !/^https?:\/\/\S+$/i.test(u) || u.length > 2000);
  if (bad) return { error: `Not a web address (http:// or https://): ${clip(bad, 80)}`, field: "urls" };
  if (startUrls.length) body.start_urls = startUrls;
  const s = String(steps ?? "").trim();
  if (s) {
    const n = Number(s);
    if (!Number.isInteger(n) || n < 1 || n > MAX_STEPS) return { error: `The step budget is a whole number from 1 to ${MAX_STEPS}.`, field: "steps" };
    body.budget = { steps: n };
  }
  const allow = [...new Set(String(tools || "").split(",").map((t) => t.trim()).filter(Boolean))];
  if (allow.length > MAX_TOOLS) return { error: `At most ${MAX_TOOLS} tools.`, field: "tools" };
  const odd = allow.find((t) => !/^[A-Za-z0-9_.:-]{1,100}$/.test(t));
  if (odd) return { error: `Not a tool name: ${clip(odd, 60)}`, field: "tools" };
  if (allow.length) body.allow_tools = allow;
  return { body };
}

// ---- one event as one readable line ------------------------------------------------

const ARG_KEYS = ["url", "query", "q", "selector", "text", "path", "name", "to", "subject"];

/** The one argument worth showing: a URL, a query, a selector…; else the arguments, short. */
export function argText(args) {
  let a = args;
  if (typeof a === "string") {
    try {
      a = JSON.parse(a);
    } catch {
      return clip(a, 80);
    }
  }
  if (!a || typeof a !== "object") return a === undefined || a === null ? "" : clip(String(a), 80);
  for (const k of ARG_KEYS) if (typeof a[k] === "string" && a[k]) return clip(a[k], 80);
  const first = Object.values(a).find((v) => typeof v === "string" && v);
  if (first) return clip(first, 80);
  const json = JSON.stringify(a);
  return json === "{}" ? "" : clip(json, 80);
}

function by(d) {
  return d.by === "agent" ? "by Delegate" : d.by === "owner" ? "by you" : "";
}

function stepWord(d) {
  return Number.isInteger(d.step) ? `Step ${d.step}` : "Step";
}

function outputText(v) {
  if (v === null || v === undefined) return "";
  if (typeof v === "string") return v;
  try {
    return JSON.stringify(v, null, 2);
  } catch {
    return String(v);
  }
}

/**
 * One ledger event of a task as one line of its log, or null for what is not a line of its own
 * (the span's open and close). Returns {key, id, seq, kind, text, tone, flag, detail, output,
 * file, url, final}: `tone` "ok" | "warn" | "bad" | ""; `flag` marks what needs the owner's eye
 * (a refusal, an unknown outcome, a gap); `detail` is a second line (answer, error, model text),
 * `output` a tool's output (folded).
 */
export function eventLine(ev) {
  if (!ev || typeof ev !== "object" || typeof ev.kind !== "string") return null;
  const kind = ev.kind;
  if (kind === "span.opened" || kind === "span.closed") return null;
  const p = (ev.payload && typeof ev.payload === "object" && ev.payload) || {};
  const d = (p.data && typeof p.data === "object" && p.data) || {};
  const line = {
    key: `ev:${ev.id ?? ev.seq}`,
    id: typeof ev.id === "string" ? ev.id : null,
    seq: int(ev.seq),
    ts: str(ev.ts) || null,
    kind,
    step: int(d.step),
    text: "",
    tone: "",
    flag: false,
    detail: "",
    output: "",
    file: null,
    url: null,
    final: false,
  };
  switch (kind) {
    case "task.created":
      line.text = `Created ${d.source === "agent" ? "by Delegate" : "by you"}: ${clip(d.goal, 160)}`;
      if (Array.isArray(d.allow_tools) && d.allow_tools.length) line.detail = `Allowed tools with side effects: ${d.allow_tools.join(", ")}`;
      break;
    case "task.started":
      line.text = Number.isInteger(d.attempt) && d.attempt > 1 ? `Started again (attempt ${d.attempt})` : "Started";
      break;
    case "task.step":
      if (d.type === "tool") {
        const arg = argText(d.arguments);
        const parts = [`${stepWord(d)}`, `${d.name || "tool"}${arg ? ` ${arg}` : ""}`, d.ok === false ? "failed" : "ok"];
        if (Number.isFinite(d.ms)) parts.push(`${formatNumber(Math.round(d.ms))} ms`);
        if (d.side_effect) parts.push("side effect");
        line.text = parts.join(SEP);
        line.tone = d.ok === false ? "warn" : "";
        line.output = outputText(d.output);
      } else {
        const calls = Array.isArray(d.calls) ? d.calls.filter((c) => c && typeof c === "object") : [];
        const what = calls.length ? `asks for ${calls.map((c) => `${c.name || "tool"}${argText(c.arguments) ? ` ${argText(c.arguments)}` : ""}`).join(", ")}` : "answers";
        const parts = [stepWord(d), `model ${what}`];
        if (Number.isFinite(d.tokens)) parts.push(`${formatNumber(d.tokens)} tokens`);
        line.text = parts.join(SEP);
        line.detail = clip(d.text, 400);
      }
      break;
    case "task.step.intent":
      line.text = [stepWord(d), `about to run ${d.name || "a tool"}${argText(d.arguments) ? ` ${argText(d.arguments)}` : ""}`, "side effect"].join(SEP);
      break;
    case "task.step.unknown":
      line.text = [stepWord(d), d.name || "tool", "outcome unknown: check by hand whether it happened"].join(SEP);
      line.detail = clip(d.reason, 300);
      line.tone = "bad";
      line.flag = true;
      break;
    case "task.refused":
      line.text = [stepWord(d), `refused ${d.name || "a tool call"}`].join(SEP);
      line.detail = clip(d.reason, 300);
      line.tone = "warn";
      line.flag = true;
      break;
    case "task.paused":
    case "task.resumed":
    case "task.cancelled": {
      const word = { "task.paused": "Paused", "task.resumed": "Resumed", "task.cancelled": "Cancelled" }[kind];
      line.text = [word, by(d)].filter(Boolean).join(" ");
      line.final = kind === "task.cancelled";
      break;
    }
    case "task.finished":
      line.text = "Finished";
      line.detail = str(d.answer);
      line.tone = "ok";
      line.final = true;
      break;
    case "task.failed": {
      const why = FAIL_WORDS[d.reason];
      line.text = why ? `Failed: ${why}` : "Failed";
      line.detail = str(d.error);
      line.tone = "bad";
      line.final = true;
      break;
    }
    case "task.screenshot":
      line.text = [stepWord(d), `screenshot${d.url ? ` of ${clip(d.url, 100)}` : ""}`].join(SEP);
      line.file = str(d.file) || null;
      line.url = str(d.url) || null;
      break;
    default:
      line.text = kind.startsWith("task.") ? `${kind.slice(5)}` : kind;
  }
  return line;
}

/** The SSE `gap` message: events the server could not send. Said, never hidden. */
export function gapLine(data, n = 0) {
  const after = data && Number.isInteger(data.after_seq) ? data.after_seq : null;
  const reason = data && typeof data.reason === "string" ? data.reason : "";
  const where = after === null ? "Some events" : `Events after #${after}`;
  return {
    key: `gap:${after ?? "?"}:${n}`,
    id: null,
    seq: after,
    ts: null,
    kind: "gap",
    step: null,
    text: `${where} could not be loaded${reason ? ` (${clip(reason, 160)})` : ""}: steps may be missing here.`,
    tone: "bad",
    flag: true,
    detail: "",
    output: "",
    file: null,
    url: null,
    final: false,
  };
}

// ---- the live log of one task --------------------------------------------------------

const STATE_AFTER = {
  "task.created": "queued",
  "task.started": "running",
  "task.paused": "paused",
  "task.resumed": "running",
  "task.cancelled": "cancelled",
  "task.finished": "done",
  "task.failed": "failed",
};

export function createTaskLog(taskId) {
  return { taskId, lines: [], ids: new Set(), lastSeq: 0, state: null, ended: false, gaps: 0, shots: [], badMessages: 0 };
}

/**
 * Add one SSE message (`type` "task" or "gap", its raw `data`, its `lastEventId`) to the log.
 * Returns the line added, or null (a repeat, the span's open/close, another task's event,
 * something unreadable). A repeat is known by event id or a seq at or below the newest.
 */
export function addTaskMessage(log, type, data, lastEventId = "") {
  let body;
  try {
    body = typeof data === "string" ? JSON.parse(data) : data;
  } catch {
    log.badMessages += 1;
    return null;
  }
  if (!body || typeof body !== "object") {
    log.badMessages += 1;
    return null;
  }
  if (type === "gap") {
    const line = gapLine(body, log.gaps);
    log.gaps += 1;
    log.lines.push(line);
    return line;
  }
  const seq = Number.isInteger(body.seq) ? body.seq : Number.parseInt(lastEventId, 10);
  if ((typeof body.id === "string" && log.ids.has(body.id)) || (Number.isInteger(seq) && seq <= log.lastSeq)) return null;
  const taskId = body.payload && body.payload.task_id;
  if (taskId && log.taskId && taskId !== log.taskId) return null;
  if (typeof body.id === "string") log.ids.add(body.id);
  if (Number.isInteger(seq)) log.lastSeq = seq;
  if (STATE_AFTER[body.kind]) log.state = STATE_AFTER[body.kind];
  const line = eventLine(Number.isInteger(body.seq) || !Number.isInteger(seq) ? body : { ...body, seq });
  if (!line) return null;
  if (line.final) log.ended = true;
  if (line.file && !log.shots.some((s) => s.file === line.file)) log.shots.push({ file: line.file, step: line.step, url: line.url });
  log.lines.push(line);
  return line;
}

/**
 * The live log of one task over GET /api/tasks/{id}/events. The browser's EventSource sends
 * the session cookie and, after a drop, reconnects with Last-Event-ID by itself; this closes it
 * once the task has ended (else a finished stream would be reopened forever).
 * `onLine(line, log)` for each new line; `onStatus(status)`: "connecting" | "live" |
 * "reconnecting" | "ended" | "closed" (the server refused or went away for good) | "stopped".
 */
export class TaskStream {
  constructor(taskId, { EventSourceImpl = globalThis.EventSource, onLine = () => {}, onStatus = () => {} } = {}) {
    this.taskId = taskId;
    this.log = createTaskLog(taskId);
    this.EventSourceImpl = EventSourceImpl;
    this.onLine = onLine;
    this.onStatus = onStatus;
    this.es = null;
    this.status = "stopped";
  }

  start() {
    if (this.es || !this.EventSourceImpl) return;
    const es = new this.EventSourceImpl(taskEventsUrl(this.taskId));
    this.es = es;
    const take = (type) => (msg) => this.message(type, msg);
    es.addEventListener("task", take("task"));
    es.addEventListener("message", take("task")); // a message without `event:` is a task event too
    es.addEventListener("gap", take("gap"));
    // The server says the task's span has closed: nothing more will come.
    es.addEventListener("end", () => this.es === es && this.stop("ended"));
    es.addEventListener("open", () => this.setStatus("live"));
    es.addEventListener("error", () => {
      if (this.es !== es) return;
      // CLOSED (2): the server refused (401, 404) or the stream is over for good.
      if (es.readyState === 2) {
        this.es = null;
        this.setStatus(this.log.ended ? "ended" : "closed");
      } else this.setStatus("reconnecting");
    });
    this.setStatus("connecting");
  }

  message(type, msg) {
    if (!this.es) return;
    const line = addTaskMessage(this.log, type, msg && msg.data, (msg && msg.lastEventId) || "");
    if (line) this.onLine(line, this.log);
    if (this.log.ended) this.stop("ended");
  }

  stop(status = "stopped") {
    if (this.es) this.es.close();
    this.es = null;
    this.setStatus(status);
  }

  setStatus(status) {
    if (this.status === status) return;
    this.status = status;
    this.onStatus(status);
  }
}

/** The words under the log for a stream status. */
export function streamStatusText(status) {
  return (
    {
      connecting: "Connecting to the live log…",
      live: "Live",
      reconnecting: "The live log dropped: reconnecting…",
      ended: "The task has ended.",
      closed: "The live log is closed (the server stopped sending it).",
      stopped: "",
    }[status] || ""
  );
}

// ---- what the timeline knows about a task ------------------------------------------

/**
 * A task's card on the timeline, from its span's events: {id, goal, state, steps, of, refused,
 * unknown, answer, error, failReason, source, lines}.
 */
export function taskFromEvents(events, spanId = null) {
  const t = { id: spanId, goal: "", state: "queued", steps: 0, of: null, refused: 0, unknown: 0, answer: null, error: null, failReason: null, source: "owner", lines: [] };
  const steps = new Set();
  for (const ev of events || []) {
    if (!ev || typeof ev.kind !== "string") continue;
    const p = (ev.payload && typeof ev.payload === "object" && ev.payload) || {};
    const d = (p.data && typeof p.data === "object" && p.data) || {};
    if (!t.id && typeof p.task_id === "string") t.id = p.task_id;
    if (STATE_AFTER[ev.kind]) t.state = STATE_AFTER[ev.kind];
    if (ev.kind === "task.created") {
      t.goal = str(d.goal);
      t.source = d.source === "agent" ? "agent" : "owner";
      if (d.budget && Number.isInteger(d.budget.steps)) t.of = d.budget.steps;
    } else if (ev.kind === "task.step" && Number.isInteger(d.step)) steps.add(d.step);
    else if (ev.kind === "task.refused") t.refused += 1;
    else if (ev.kind === "task.step.unknown") t.unknown += 1;
    else if (ev.kind === "task.finished") t.answer = str(d.answer);
    else if (ev.kind === "task.failed") {
      t.error = str(d.error);
      t.failReason = str(d.reason) || null;
    }
    const line = eventLine(ev);
    if (line) t.lines.push(line);
  }
  t.steps = steps.size;
  return t;
}

// ---- DOM builders --------------------------------------------------------------------

const SVG_NS = "http://www.w3.org/2000/svg";

/** A checklist mark (the topbar button, the timeline card). */
export function taskIcon(className = "icon") {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("viewBox", "0 0 24 24");
  svg.setAttribute("class", className);
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("focusable", "false");
  for (const d of ["M4 6l1.5 1.5L8 5", "M11 6.5h9", "M4 12l1.5 1.5L8 11", "M11 12.5h9", "M5 18h2", "M11 18.5h9"]) {
    const path = document.createElementNS(SVG_NS, "path");
    path.setAttribute("d", d);
    svg.appendChild(path);
  }
  return svg;
}

/** The state badge: the word is the meaning; colour only adds to it. */
export function stateBadge(state, refused = 0) {
  // Done with refused steps is never a green "Done".
  if (state === "done" && refused > 0) return h("span", { class: "task-badge state-partial", "data-state": state, text: `Done, ${refused} refused` });
  return h("span", { class: `task-badge state-${STATE_WORDS[state] ? state : "unknown"}`, "data-state": state || "", text: stateLabel(state) });
}

/** The progress bar and "3 / 40 steps". The bar's width is set through CSSOM (the CSP allows no style attributes). */
export function progressNode(task) {
  const pr = taskProgress(task);
  const fill = h("span", { class: "task-progress-fill" });
  if (pr.fraction !== null && fill.style) fill.style.width = `${Math.round(pr.fraction * 100)}%`;
  return h(
    "span",
    { class: "task-progress", title: pr.text },
    pr.fraction !== null ? h("span", { class: "task-progress-bar", "aria-hidden": "true" }, fill) : null,
    h("span", { class: "task-progress-text", text: pr.text }),
  );
}

/**
 * One line of a task's log: the line, its second line (answer, error, model text, reason), a
 * folded tool output. Flagged lines (refusals, unknown outcomes, gaps) say so in words too.
 */
export function logLineNode(line) {
  const flagWord = line.kind === "gap" ? "Gap" : line.kind === "task.refused" ? "Refused" : line.kind === "task.step.unknown" ? "Check" : "";
  const node = h(
    "li",
    {
      class: `task-line${line.tone ? ` tone-${line.tone}` : ""}${line.flag ? " flagged" : ""}${line.final ? " final" : ""}`,
      "data-kind": line.kind,
      "data-event-id": line.id,
      "data-seq": line.seq ?? null,
      "data-step": line.step ?? null,
    },
    h(
      "div",
      { class: "task-line-main" },
      flagWord ? h("span", { class: "task-flag", text: flagWord }) : null,
      h("span", { class: "task-line-text", text: line.text }),
      line.ts ? h("time", { class: "task-line-time", datetime: line.ts, title: fullTime(line.ts), text: formatTime(line.ts) }) : null,
    ),
  );
  if (line.detail && line.final && line.kind === "task.finished") {
    // A task's answer is written in markdown like any answer.
    const answer = h("div", { class: "task-line-detail task-answer md" });
    answer.appendChild(renderMarkdown(document, line.detail));
    node.appendChild(answer);
  } else if (line.detail) node.appendChild(h("div", { class: line.final ? "task-line-detail task-answer" : "task-line-detail", text: line.detail }));
  if (line.output) {
    node.appendChild(
      h("details", { class: "task-line-output" }, h("summary", { text: `Output (${formatNumber(line.output.length)} characters)` }), h("pre", { text: line.output })),
    );
  }
  return node;
}

/**
 * One task of the panel's list: a button selecting it (goal, state, progress, when) and
 * Pause / Resume / Cancel as its state allows. `mode` "confirm" asks before cancelling.
 * `on`: select(task), pause(task), resume(task), confirm(task), cancel(task), keep(task).
 */
export function taskRow(task, { selected = false, busy = "", mode = "view", error = "", now = new Date(), on = {} } = {}) {
  const call = (name) => () => on[name] && on[name](task);
  const allowed = taskActions(task.state);
  const goal = clip(task.goal, 80) || "(no goal)";
  const meta = [formatTime(task.created_at, now), task.source === "agent" ? "by Delegate" : ""];
  if (task.refused) meta.push(`${task.refused} refused`);
  if (task.unknown_steps.length) meta.push(`${task.unknown_steps.length} to check`);
  const select = h(
    "button",
    { type: "button", class: "task-select", "aria-pressed": selected ? "true" : "false", title: "Show this task", onclick: call("select") },
    h("span", { class: "task-goal", text: task.goal || "(no goal)" }),
    h(
      "span",
      { class: "task-meta" },
      stateBadge(task.state, task.refused),
      progressNode(task),
      h("span", { class: "task-when", text: meta.filter(Boolean).join(SEP) }),
    ),
  );
  const row = h("li", { class: `task-row${selected ? " selected" : ""}`, "data-task-id": task.id, "data-state": task.state, "aria-current": selected ? "true" : null }, select);
  if (allowed.pause || allowed.resume || allowed.cancel) {
    const actions = h("div", { class: "task-actions" });
    if (mode === "confirm" && allowed.cancel) {
      append(actions, [
        h("span", { class: "task-confirm-text", text: "Cancel this task? It stops for good." }),
        h("button", { type: "button", class: "danger small task-cancel-yes", text: busy === "cancel" ? "Cancelling…" : "Cancel task", disabled: !!busy, "aria-label": `Cancel task for good: ${goal}`, onclick: call("cancel") }),
        h("button", { type: "button", class: "ghost small task-cancel-no", text: "Keep it", disabled: !!busy, onclick: call("keep") }),
      ]);
    } else {
      append(actions, [
        h("button", { type: "button", class: "ghost small task-pause", text: busy === "pause" ? "Pausing…" : "Pause", disabled: !allowed.pause || !!busy, "aria-label": `Pause task: ${goal}`, onclick: call("pause") }),
        h("button", { type: "button", class: "ghost small task-resume", text: busy === "resume" ? "Resuming…" : "Resume", disabled: !allowed.resume || !!busy, "aria-label": `Resume task: ${goal}`, onclick: call("resume") }),
        h("button", { type: "button", class: "ghost small task-cancel", text: "Cancel", disabled: !allowed.cancel || !!busy, "aria-label": `Cancel task: ${goal}`, onclick: call("confirm") }),
      ]);
    }
    row.appendChild(actions);
  }
  if (error) row.appendChild(h("p", { class: "form-error task-error", role: "alert", text: error }));
  return row;
}

/** The screenshots of a task: REST's names, and live ones from the log (with their step and page). */
export function screenshotList(task, log) {
  const out = [];
  const seen = new Set();
  for (const s of (log && log.shots) || []) {
    if (!seen.has(s.file)) out.push(s);
    seen.add(s.file);
  }
  for (const file of (task && task.screenshots) || []) {
    if (!seen.has(file)) out.push({ file, step: null, url: null });
    seen.add(file);
  }
  return out.sort((a, b) => (a.step ?? Infinity) - (b.step ?? Infinity));
}

/** One thumbnail: a button holding the image; a click shows it full size. */
export function screenshotNode(taskId, shot, n, { onOpen } = {}) {
  const label = `Screenshot ${n}${shot.step !== null && shot.step !== undefined ? `, step ${shot.step}` : ""}${shot.url ? `: ${clip(shot.url, 120)}` : ""}`;
  const src = screenshotUrl(taskId, shot.file);
  return h(
    "li",
    { class: "task-shot", "data-file": shot.file },
    h(
      "button",
      { type: "button", class: "task-shot-btn", "aria-label": `${label}. Show full size`, title: label, onclick: onOpen ? () => onOpen(shot, src, label) : null },
      h("img", { src, alt: label, loading: "lazy", decoding: "async" }),
    ),
  );
}

/**
 * A task span on the timeline: one compact card ("Task · goal", state, progress, Open) with the
 * steps folded inside it (never one row per step), and how it ended.
 */
export function taskCardNode(block, { onOpen } = {}) {
  const goal = h("span", { class: "task-card-goal" });
  const meta = h("span", { class: "task-card-meta" });
  const end = h("p", { class: "task-card-end", hidden: true });
  const summary = h("summary", { class: "task-card-steps-head" });
  const list = h("ol", { class: "task-log task-card-log" });
  const steps = h("details", { class: "task-card-steps" }, summary, list);
  const open = h("button", { type: "button", class: "ghost small task-open", text: "Open", onclick: () => onOpen && onOpen(node._taskId) });
  const node = h(
    "section",
    { class: "span task-card", "data-span-id": block.span_id, "data-span-type": "task" },
    h(
      "div",
      { class: "task-card-head" },
      taskIcon("icon task-card-icon"),
      h("div", { class: "task-card-heading" }, h("span", { class: "task-card-title" }, h("span", { class: "task-card-kind", text: "Task" }), goal), meta),
      open,
    ),
    end,
    steps,
  );
  Object.assign(node, { _goal: goal, _meta: meta, _end: end, _summary: summary, _list: list, _open: open, _lines: new Map(), _sig: "" });
  updateTaskCard(node, block);
  return node;
}

export function updateTaskCard(node, block) {
  const events = (block.items || []).filter((i) => i.type === "event").map((i) => i.event);
  const t = taskFromEvents(events, block.span_id);
  node._taskId = t.id;
  node.setAttribute("data-task-id", t.id || "");
  node.setAttribute("data-state", t.state);
  setText(node._goal, t.goal || "(goal not loaded)");
  node._goal.setAttribute("title", t.goal);
  const when = formatRange(block.start, block.end);
  const progress = t.of ? `${t.steps} / ${t.of} steps` : `${t.steps} step${t.steps === 1 ? "" : "s"}`;
  const extra = [t.refused ? `${t.refused} refused` : "", t.unknown ? `${t.unknown} to check` : ""].filter(Boolean);
  const cost = spanCost(block);
  const sig = [t.state, progress, when, cost, ...extra].join("|");
  if (node._sig !== sig) {
    node._sig = sig;
    node._meta.replaceChildren(
      stateBadge(t.state, t.refused),
      h("span", { class: "task-card-progress", text: progress }),
      h("span", { class: "task-card-time", text: when }),
      ...(cost ? [h("span", { class: "task-card-cost", title: "What this task's model calls cost", text: cost })] : []),
      ...extra.map((x) => h("span", { class: "task-card-flag", text: x })),
    );
  }
  node._open.setAttribute("aria-label", `Open in the Tasks panel: ${clip(t.goal, 80) || "task"}`);
  node.setAttribute("aria-label", `Task, ${stateLabel(t.state)}: ${clip(t.goal, 120)}`);
  const ended = t.state === "done" ? t.answer : t.state === "failed" ? [FAIL_WORDS[t.failReason] ? `Failed: ${FAIL_WORDS[t.failReason]}` : "Failed", t.error].filter(Boolean).join(SEP) : "";
  setText(node._end, ended ? clip(ended, 280) : "");
  node._end.hidden = !ended;
  node._end.setAttribute("data-tone", t.state === "failed" ? "bad" : t.refused ? "warn" : "ok");
  const n = t.lines.length;
  setText(node._summary, `${n} event${n === 1 ? "" : "s"}${t.steps ? ` · ${t.steps} step${t.steps === 1 ? "" : "s"}` : ""}`);
  reconcile(
    node._list,
    node._lines,
    t.lines.map((l) => ({ key: l.key, line: l })),
    (item) => logLineNode(item.line),
  );
}
