// The Tasks panel: start a task, the list (state, progress, Pause / Resume / Cancel), and the
// selected task's live log (SSE), screenshots and run picture. The list is read when the panel
// opens, after a reconnect, and whenever a `task.*` event arrives on /chat or on the open
// task's stream — no polling. This object holds the panel's state (the selected id, the open
// stream, the rows' busy and error marks) and draws the list; the selected task's detail is
// drawn by task-detail.js, the run picture's asking is task-picture.js.

import { api, HttpError } from "./api.js";
import { reconcile, setText } from "./dom.js";
import { Panel, panelElements, showStatus } from "./panel.js";
import { appendLogLine, buildDetail, drawDetail, resetLog } from "./task-detail.js";
import { TaskStream } from "./task-log.js";
import { RunPicture } from "./task-picture.js";
import { taskIcon, taskRow } from "./task-rows.js";
import { isActive, isTerminal, refreshesTasks, taskBody, taskFrom, tasksFrom } from "./tasks.js";

const $ = (id) => document.getElementById(id);

const REFRESH_OPEN_MS = 300; // a burst of steps is one request
const REFRESH_CLOSED_MS = 3000; // closed, only the button's count follows

/** An error of the task routes, in words. */
export function taskErrorText(err, doing) {
  if (err instanceof HttpError) {
    if (err.status === 409) return `Could not ${doing}: ${err.message && !/^HTTP \d+$/.test(err.message) ? err.message : "not possible in the task’s state now"}.`;
    if (err.status === 404 && err.code === "not_found") return "That task is not there any more.";
    if (err.status === 502 || err.status === 503 || err.status === 504) return "Tasks are unavailable right now: Delegate’s task service is not answering.";
    if (err.status === 404) return "Tasks are not available on this server.";
    if (err.status === 400 || err.status === 413 || err.status === 422) return err.message && !/^HTTP \d+$/.test(err.message) ? err.message : `Could not ${doing}.`;
  }
  return `Could not ${doing}: Delegate is not answering. Try again.`;
}

function newKey() {
  try {
    return crypto.randomUUID();
  } catch {
    return Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
  }
}

const DOING = { pause: "pause the task", resume: "resume the task", cancel: "cancel the task" };
const DONE = { pause: "Task paused.", resume: "Task resumed.", cancel: "Task cancelled." };

export class TasksPanel extends Panel {
  /** @param {{onUnauthorized: () => void, toast: (text: string, tone?: string) => void}} hooks */
  constructor(hooks) {
    // Closed, events still refresh it (less often): the count on the button follows them.
    super(hooks, panelElements("tasks"), { debounceMs: REFRESH_OPEN_MS, whileClosed: true, keyboard: true });
    this.tasks = [];
    this.selectedId = null;
    this.selectedExtra = null; // the selected task when the list does not hold it
    this.rowState = new Map(); // task id -> {mode, busy, error}
    this.rows = new Map();
    this.stream = null;
    this.detail = null; // the selected task's detail nodes
    // The run picture, asked for until it is drawn; a change of its state redraws the detail.
    this.picture = new RunPicture({ onUnauthorized: () => this.hooks.onUnauthorized(), changed: () => this.renderDetail() });
    this.creating = false;
    this.draft = null; // {sig, key}: the Idempotency-Key of the form as last sent
    this.focusAfter = null;
    const slot = document.querySelector("#tasks-btn .task-btn-icon");
    if (slot) slot.replaceWith(taskIcon("icon btn-icon"));
    $("task-form").addEventListener("submit", (e) => {
      e.preventDefault();
      this.create();
    });
    const shots = $("task-shot-dialog");
    shots.addEventListener("close", () => {
      $("task-shot-img").removeAttribute("src");
    });
  }

  /** Open the panel; with a task id, show that task (the timeline card's Open). */
  open(taskId = null) {
    this.show();
    if (taskId) this.select(taskId, { scroll: true });
    if (this.selectedId && !this.stream) this.startStream();
    this.render();
    this.refresh();
    if (!taskId) {
      const first = $("tasks-list").querySelector(".task-select");
      (first || ($("task-new").open ? $("task-goal") : $("task-new").querySelector("summary"))).focus();
    }
  }

  close(returnFocus = false) {
    super.close(returnFocus);
    this.stopStream();
    this.picture.stop();
  }

  reset() {
    this.tasks = [];
    this.selectedId = null;
    this.selectedExtra = null;
    this.rowState.clear();
    this.draft = null;
    this.dropDetail();
  }

  relevant(ev) {
    return refreshesTasks(ev);
  }

  errorText(err) {
    return taskErrorText(err, "load the tasks");
  }

  /** After a reconnect: whatever changed meanwhile (closed too, once the button shows a count). */
  reconnected() {
    if (this.isOpen || this.loaded) this.refresh();
  }

  /** Read the list soon: at most once per interval however many events arrive (a running task never stops sending). */
  soon() {
    if (this.timer) return;
    this.timer = setTimeout(
      () => {
        this.timer = null;
        this.refresh();
      },
      this.isOpen ? REFRESH_OPEN_MS : REFRESH_CLOSED_MS,
    );
  }

  /** The list, and the selected task when the list does not hold it (just made, or older than the list). */
  async load() {
    const tasks = tasksFrom(await api.tasks());
    const id = this.selectedId;
    const extra = id && !tasks.some((t) => t.id === id) ? taskFrom(await api.task(id).catch(() => null)) : null;
    return { tasks, extra };
  }

  apply({ tasks, extra }) {
    this.tasks = tasks;
    if (!this.loaded && !tasks.length) $("task-new").open = true; // nothing yet: start with the form
    this.selectedExtra = extra;
  }

  selected() {
    if (!this.selectedId) return null;
    return this.tasks.find((t) => t.id === this.selectedId) || (this.selectedExtra && this.selectedExtra.id === this.selectedId ? this.selectedExtra : null);
  }

  replaceTask(task) {
    if (!task) return;
    const i = this.tasks.findIndex((t) => t.id === task.id);
    this.tasks = i < 0 ? [task, ...this.tasks] : this.tasks.map((t) => (t.id === task.id ? task : t));
  }

  // ---- acting ---------------------------------------------------------------------

  select(taskId, { scroll = false, focus = false } = {}) {
    if (this.selectedId !== taskId) {
      this.selectedId = taskId;
      this.selectedExtra = null;
      this.dropDetail();
      if (this.isOpen) this.startStream();
    }
    if (focus) this.focusAfter = [taskId, ".task-select"];
    this.render();
    if (!this.selected()) this.refresh(); // not listed yet (just made, or older than the list)
    if (scroll) {
      const row = $("tasks-list").querySelector(`[data-task-id="${CSS.escape(taskId)}"]`);
      if (row) row.scrollIntoView({ block: "nearest" });
      $("task-detail").focus();
    }
  }

  setRow(id, patch, focus = null) {
    const st = { mode: "view", busy: "", error: "", ...(this.rowState.get(id) || {}), ...patch };
    if (st.mode === "view" && !st.busy && !st.error) this.rowState.delete(id);
    else this.rowState.set(id, st);
    if (focus) this.focusAfter = [id, focus];
    this.render();
  }

  async control(task, action) {
    const session = this.session;
    this.setRow(task.id, { busy: action, error: "" });
    try {
      const body = await api.controlTask(task.id, action);
      if (session !== this.session) return;
      this.replaceTask(taskFrom(body));
      this.rowState.delete(task.id);
      this.focusAfter = [task.id, ".task-select"];
      this.hooks.toast(DONE[action]);
    } catch (err) {
      if (session !== this.session) return;
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      this.setRow(task.id, { mode: "view", busy: "", error: taskErrorText(err, DOING[action]) }, ".task-select");
    }
    this.render();
    this.refresh(); // the truth is the task service's
  }

  async create() {
    if (this.creating) return;
    const form = {
      goal: $("task-goal").value,
      urls: $("task-urls").value,
      steps: $("task-steps").value,
      tools: $("task-tools").value,
    };
    const parsed = taskBody(form);
    const error = $("task-form-error");
    if (parsed.error) {
      setText(error, parsed.error);
      error.hidden = false;
      const field = { goal: "task-goal", urls: "task-urls", steps: "task-steps", tools: "task-tools" }[parsed.field];
      if (field === "task-tools") $("task-advanced").open = true;
      if (field) $(field).focus();
      return;
    }
    error.hidden = true;
    // One key per form content: a retry of the same form after a lost answer is stored once.
    const sig = JSON.stringify(parsed.body);
    if (!this.draft || this.draft.sig !== sig) this.draft = { sig, key: newKey() };
    this.creating = true;
    const button = $("task-submit");
    button.disabled = true;
    setText(button, "Starting…");
    const session = this.session;
    try {
      const body = await api.createTask(parsed.body, this.draft.key);
      if (session !== this.session) return;
      this.draft = null;
      const task = taskFrom(body);
      for (const id of ["task-goal", "task-urls", "task-steps", "task-tools"]) $(id).value = "";
      $("task-advanced").open = false;
      this.hooks.toast("Task started.");
      if (task) {
        // A create may answer only {id, state}: the list fills in the rest.
        if (task.goal) this.replaceTask(task);
        this.select(task.id, { focus: true });
      }
      this.refresh();
    } catch (err) {
      if (session !== this.session) return;
      if (err instanceof HttpError && err.status === 401) return this.hooks.onUnauthorized();
      setText(error, taskErrorText(err, "start the task"));
      error.hidden = false;
    } finally {
      this.creating = false;
      button.disabled = false;
      setText(button, "Start task");
    }
  }

  // ---- the live log ---------------------------------------------------------------

  startStream() {
    this.stopStream();
    const id = this.selectedId;
    if (!id || typeof EventSource === "undefined") return;
    const session = this.session;
    this.stream = new TaskStream(id, {
      onLine: (line) => {
        if (session !== this.session || !this.stream || this.stream.taskId !== id) return;
        this.appendLine(line);
        this.soon(); // state and progress: the list follows the log
      },
      onStatus: () => this.renderDetail(),
    });
    if (this.detail && this.detail.taskId === id) resetLog(this.detail);
    this.stream.start();
  }

  stopStream() {
    if (this.stream) {
      const s = this.stream;
      this.stream = null;
      s.onStatus = () => {};
      s.stop();
    }
  }

  appendLine(line) {
    if (this.detail) appendLogLine(this.detail, line);
    this.renderDetail();
  }

  // ---- rendering ------------------------------------------------------------------

  render() {
    const active = this.tasks.filter((t) => isActive(t.state)).length;
    const badge = $("tasks-count");
    setText(badge, String(active));
    badge.hidden = !this.loaded || active === 0;
    $("tasks-btn").setAttribute("aria-label", this.loaded && active ? `Tasks: ${active} active` : "Tasks");
    const empty = "No tasks yet. Give Delegate a goal to work on in the background, like “find three quiet cafés near the office and compare their hours”.";
    showStatus($("tasks-status"), this.statusText(!this.tasks.length, empty), Boolean(this.error));
    const now = new Date();
    const on = {
      select: (t) => this.select(t.id, { focus: true }),
      pause: (t) => this.control(t, "pause"),
      resume: (t) => this.control(t, "resume"),
      confirm: (t) => this.setRow(t.id, { mode: "confirm", error: "" }, ".task-cancel-no"),
      keep: (t) => this.setRow(t.id, { mode: "view" }, ".task-cancel"),
      cancel: (t) => this.control(t, "cancel"),
    };
    reconcile(
      $("tasks-list"),
      this.rows,
      this.tasks.map((t) => {
        const st = this.rowState.get(t.id) || {};
        const selected = t.id === this.selectedId;
        // Keyed by what changes the buttons: a step only refreshes the progress, so focus stays put.
        const key = [t.id, t.state, t.refused, t.unknown_steps.length, t.goal, selected, st.mode, st.busy, st.error].join("\u0000");
        return { key, task: t, st, selected };
      }),
      (item) => taskRow(item.task, { selected: item.selected, now, ...item.st, on }),
      (node, item) => {
        const meta = node.querySelector(".task-meta");
        const fresh = taskRow(item.task, { selected: item.selected, now, ...item.st }).querySelector(".task-meta");
        if (meta && fresh && meta.textContent !== fresh.textContent) meta.replaceWith(fresh);
      },
    );
    if (this.focusAfter) {
      const [id, selector] = this.focusAfter;
      this.focusAfter = null;
      const target = $("tasks-list").querySelector(`[data-task-id="${CSS.escape(id)}"] ${selector}`);
      if (target) target.focus();
    }
    this.renderDetail();
  }

  dropDetail() {
    this.stopStream();
    this.picture.stop();
    this.detail = null;
    $("task-detail").replaceChildren();
    $("task-detail").hidden = true;
  }

  renderDetail() {
    const box = $("task-detail");
    const task = this.selected();
    if (!this.selectedId) {
      box.hidden = true;
      return;
    }
    box.hidden = false;
    const stream = this.stream && this.stream.taskId === this.selectedId ? this.stream : null;
    if (!this.detail || this.detail.taskId !== this.selectedId) {
      this.detail = buildDetail(this.selectedId, (stream && stream.log.lines) || [], { onReconnect: () => this.startStream() });
    }
    const log = stream ? stream.log : null;
    drawDetail(this.detail, { task, log, streamStatus: stream ? stream.status : "stopped" });
    this.picture.render(this.detail, task && (log && log.ended && !isTerminal(task.state) ? { ...task, state: log.state } : task));
  }
}
