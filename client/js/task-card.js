// A task on the timeline: its span is one compact card ("Task · goal", state, progress, Open)
// with the steps folded inside, built from the span's own events.

import { h, reconcile, setText } from "./dom.js";
import { clip, formatRange } from "./format.js";
import { STATE_AFTER, eventLine } from "./task-log.js";
import { logLineNode, stateBadge, taskIcon } from "./task-rows.js";
import { FAIL_WORDS, SEP, stateLabel, str } from "./tasks.js";
import { spanCost } from "./timeline-spans.js";

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
