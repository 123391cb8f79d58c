// Durable tasks: what a task is and what may be done with it, as pure data. The tasks service
// runs long browser/research jobs apart from the conversation; the gateway lists tasks at
// GET /api/tasks and serves a task's screenshots at /api/tasks/{id}/files/{name} and its run
// picture at /api/runs/{run_id}/diagram (SVG). No fetch and no DOM here: a task's log is
// task-log.js, its rows task-rows.js, its card on the timeline task-card.js, and tasks-ui.js
// asks the API.
//
// Everything a task says (goal, answer, page-derived output, errors) is untrusted: it only
// ever becomes text nodes and attribute values, never markup.

import { clip, formatNumber } from "./format.js";

export const TASK_STATES = ["queued", "running", "paused", "done", "failed", "cancelled"];
const TERMINAL = new Set(["done", "failed", "cancelled"]);
export const STATE_WORDS = { queued: "Queued", running: "Running", paused: "Paused", done: "Done", failed: "Failed", cancelled: "Cancelled" };

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

export const SEP = " · ";

/** A string field of the API's or an event's, or "". */
export function str(v) {
  return typeof v === "string" ? v : "";
}

/** A whole-number field, or null. */
export function int(v) {
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
