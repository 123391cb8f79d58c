// The Tasks panel's DOM pieces: a task's row with its controls, its state badge and progress,
// one line of its log, its screenshots, and the checklist icon the topbar and the card share.

import { append, h } from "./dom.js";
import { clip, formatNumber, formatTime, fullTime } from "./format.js";
import { renderMarkdown } from "./markdown.js";
import { SEP, STATE_WORDS, screenshotUrl, stateLabel, taskActions, taskProgress } from "./tasks.js";

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
