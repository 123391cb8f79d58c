// The Tasks panel's selected task, drawn into #task-detail: its goal, state and facts, the live
// log, how it ended and its screenshots (the run picture's part: task-picture.js). The panel
// (tasks-ui.js) holds which task is selected and its stream; this draws what they say.

import { h, reconcile, setText } from "./dom.js";
import { formatTime, fullTime } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { streamStatusText } from "./task-log.js";
import { logLineNode, progressNode, screenshotList, screenshotNode, stateBadge } from "./task-rows.js";
import { budgetText, outcome } from "./tasks.js";

const $ = (id) => document.getElementById(id);

const STICK_PX = 40;

/** The detail's nodes for task `id`, put in #task-detail, with the log lines its stream already holds. */
export function buildDetail(id, lines, { onReconnect }) {
  const d = {
    taskId: id,
    goal: h("p", { class: "task-detail-goal" }),
    meta: h("div", { class: "task-detail-meta" }),
    facts: h("dl", { class: "task-facts" }),
    warn: h("p", { class: "task-warning", role: "note", hidden: true }),
    log: h("ol", { class: "task-log", role: "log", "aria-live": "off", "aria-label": "What the task did, step by step" }),
    streamStatus: h("span", { class: "task-stream-status muted small", role: "status" }),
    reconnect: h("button", { type: "button", class: "ghost small task-reconnect", text: "Reconnect", hidden: true, onclick: onReconnect }),
    outcome: h("div", { class: "task-outcome", hidden: true }),
    shots: h("ul", { class: "task-shots", "aria-label": "Screenshots" }),
    shotsEmpty: h("p", { class: "muted small", text: "No screenshots yet." }),
    picture: h("div", { class: "task-picture" }),
    lines: new Map(),
    shotNodes: new Map(),
    sig: "",
    pictureSig: "",
  };
  d.logBox = h("div", { class: "task-log-box" }, d.log);
  $("task-detail").replaceChildren(
    h("div", { class: "task-detail-head" }, h("h3", { class: "sr-only", text: "Selected task" }), d.goal, d.meta),
    d.facts,
    d.warn,
    h("section", { class: "task-section", "aria-label": "Live log" }, h("h4", { class: "task-section-title" }, "Log ", d.streamStatus, d.reconnect), d.logBox, d.outcome),
    h("section", { class: "task-section", "aria-label": "Screenshots" }, h("h4", { class: "task-section-title", text: "Screenshots" }), d.shotsEmpty, d.shots),
    h("section", { class: "task-section", "aria-label": "Run picture" }, h("h4", { class: "task-section-title", text: "Run picture" }), d.picture),
  );
  for (const line of lines) {
    const node = logLineNode(line);
    d.lines.set(line.key, node);
    d.log.appendChild(node);
  }
  return d;
}

/** Draw the selected task (`task`: null while it loads), its stream's `log` and `streamStatus` into `d`. */
export function drawDetail(d, { task, log, streamStatus }) {
  const box = $("task-detail");
  // A state newer than the list's (the log runs ahead of it): the log's word wins until the list catches up.
  const state = task ? task.state : (log && log.state) || "";
  box.setAttribute("data-task-id", d.taskId);
  box.setAttribute("data-state", state);
  setText(d.goal, task ? task.goal : "Loading the task…");
  const sig = task ? [state, task.steps, task.updated_at, task.refused, task.unknown_steps.join(","), task.screenshots.length].join("|") : "";
  if (d.sig !== sig && task) {
    d.sig = sig;
    d.meta.replaceChildren(
      stateBadge(state, task.refused),
      progressNode(task),
      h("span", { class: "task-when", title: fullTime(task.created_at), text: `started ${formatTime(task.created_at)}${task.source === "agent" ? " by Delegate" : ""}` }),
    );
    const facts = [];
    if (task.start_urls.length) facts.push(["Start URLs", task.start_urls.join("\n")]);
    const limits = budgetText(task.budget);
    if (limits) facts.push(["Budget", limits]);
    if (task.allow_tools.length) facts.push(["Allowed side effects", task.allow_tools.join(", ")]);
    if (task.refused) facts.push(["Refused", `${task.refused} tool call${task.refused === 1 ? "" : "s"} the task may not make`]);
    d.facts.replaceChildren(...facts.flatMap(([k, v]) => [h("dt", { text: k }), h("dd", { text: v })]));
    d.facts.hidden = facts.length === 0;
    const unknown = task.unknown_steps;
    setText(
      d.warn,
      unknown.length
        ? `Check by hand: step${unknown.length === 1 ? "" : "s"} ${unknown.join(", ")} had a side effect whose outcome is unknown (the runner stopped in the middle).`
        : "",
    );
    d.warn.hidden = !unknown.length;
  }
  // The stream's state, and a way back when it closed.
  setText(d.streamStatus, streamStatusText(streamStatus));
  d.streamStatus.dataset.status = streamStatus;
  d.reconnect.hidden = streamStatus !== "closed";
  // How it ended, when the log does not say it (a gap, or a log that could not be read).
  const out = task ? outcome(task) : null;
  const logSaysIt = log && log.ended;
  d.outcome.hidden = !out || !!logSaysIt;
  if (out && !logSaysIt) {
    const osig = `${out.label}|${out.text}`;
    if (d.outcomeSig !== osig) {
      d.outcomeSig = osig;
      d.outcome.dataset.tone = out.tone;
      // An answer renders its markdown; an error stays plain text.
      const body = out.text ? h("div", { class: out.label.startsWith("Answer") ? "task-answer md" : "task-answer" }) : null;
      if (body && out.label.startsWith("Answer")) body.appendChild(renderMarkdown(document, out.text));
      else if (body) body.textContent = out.text;
      d.outcome.replaceChildren(h("strong", { text: out.label }), body);
    }
  }
  // Screenshots: REST's names and live ones.
  const shots = screenshotList(task, log);
  d.shotsEmpty.hidden = shots.length > 0;
  reconcile(
    d.shots,
    d.shotNodes,
    shots.map((s, i) => ({ key: `${s.file}:${s.step ?? ""}:${s.url ?? ""}:${i}`, shot: s, n: i + 1 })),
    (item) => screenshotNode(d.taskId, item.shot, item.n, { onOpen: showShot }),
  );
}

/** The log starts over (a new stream for the same task). */
export function resetLog(d) {
  d.log.replaceChildren();
  d.lines = new Map();
}

/** A new log line at the end; the log follows it when the reader was at the bottom. */
export function appendLogLine(d, line) {
  const box = d.logBox;
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < STICK_PX;
  if (!d.lines.has(line.key)) {
    const node = logLineNode(line);
    d.lines.set(line.key, node);
    d.log.appendChild(node);
  }
  if (atBottom) box.scrollTop = box.scrollHeight;
}

/** A screenshot full size, in the dialog. */
function showShot(shot, src, label) {
  const dialog = $("task-shot-dialog");
  setText($("task-shot-title"), label);
  const img = $("task-shot-img");
  img.src = src;
  img.alt = label;
  $("task-shot-link").href = src;
  if (!dialog.open) dialog.showModal();
}
