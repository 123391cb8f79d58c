// The live log of one task: each `task.*` ledger event as one readable line, and the stream of
// them over Server-Sent Events. Everything that happens to a task is a `task.*` event in the
// task's own span (`span.opened` type "task", span id = task id), payload {task_id, data}; the
// gateway streams one task's events at GET /api/tasks/{id}/events (`event: task`, `id: <seq>`,
// and `event: gap` when it cannot fill a gap).

import { clip, formatNumber } from "./format.js";
import { FAIL_WORDS, SEP, int, str, taskEventsUrl } from "./tasks.js";

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

/** The state a task is in after each event that changes it. */
export const STATE_AFTER = {
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
