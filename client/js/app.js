// Delegate in the browser: sign-in, the socket's frames, and the parts of the page wired
// together. What each part does lives in its own module: the timeline on the page
// (timeline-pane.js), the composer and chat controls (composer.js), the top bar's state
// (status-bar.js), the search bar (find-bar.js), menus, sheets and Escape (shell.js), and the
// panels (*-ui.js).

import { api, HttpError } from "./api.js";
import { ChatConnection, timelineReady } from "./connection.js";
import { h, icon } from "./dom.js";
import { compactionBefore } from "./context.js";
import { toJSON, toMarkdown } from "./search.js";
import { VoiceUI } from "./voice-ui.js";
import { RemindersPanel } from "./reminders-ui.js";
import { PeoplePanel } from "./people-ui.js";
import { CommitmentsPanel } from "./commitments-ui.js";
import { UsagePanel } from "./usage-ui.js";
import { reminderText } from "./reminders.js";
import { MemoryPanel } from "./memory-ui.js";
import { TasksPanel } from "./tasks-ui.js";
import { TimelineSearch } from "./timeline-search.js";
import { Notifier } from "./notify.js";
import { dropLocal, registerWorker } from "./push.js";
import { addLive, applyDelta, createTimeline, mergePage, updatePending } from "./timeline.js";
import { TimelinePane } from "./timeline-pane.js";
import { Composer } from "./composer.js";
import { StatusBar } from "./status-bar.js";
import { FindBar } from "./find-bar.js";
import { Shell } from "./shell.js";

const $ = (id) => document.getElementById(id);

const STATUS_TEXT = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  "signed-out": "Signed out",
  stopped: "Offline",
};
const ERROR_TEXT = {
  busy: "Delegate is busy right now.",
  not_found: "That answer is no longer there.",
  not_last: "Only the last answer can be regenerated, and only the last message edited.",
};

class App {
  constructor() {
    this.tl = createTimeline();
    this.everLive = false;
    this.conn = null;
    this.state = null;
    this.session = 0; // bumps on every sign-in/out so stale async work is dropped
    for (const slot of document.querySelectorAll(".btn-icon[data-icon]")) slot.replaceWith(icon(slot.dataset.icon, "icon btn-icon"));
    this.pane = new TimelinePane(this, {
      onRetry: (cid) => this.composer.postMessage(cid),
      onCopy: (text, button) => this.composer.copy(text, button),
      onRegenerate: (ev) => this.composer.regenerate(ev),
      onEdit: (ev) => this.composer.startEdit(ev),
      figures: (ev) => this.figures(ev),
      onOpenTask: (id) => this.tasks.open(id),
    });
    this.composer = new Composer(this);
    this.status = new StatusBar(this);
    this.find = new FindBar(this);
    this.shell = new Shell(this);
    this.wire();
    this.voice = new VoiceUI(); // after the icons are in place
    const hooks = {
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
    };
    const jumpTo = (id) => this.pane.jumpToEvent(id);
    this.reminders = new RemindersPanel(hooks);
    this.memory = new MemoryPanel({ ...hooks, jumpTo });
    this.people = new PeoplePanel({ ...hooks, jumpTo });
    this.commitments = new CommitmentsPanel(hooks);
    this.tasks = new TasksPanel(hooks);
    this.notify = new Notifier({ toast: hooks.toast, button: $("notify-btn") });
    this.usage = new UsagePanel({ ...hooks, jumpTo });
    this.wholeSearch = new TimelineSearch({
      onUnauthorized: hooks.onUnauthorized,
      jumpTo,
      close: () => {
        this.find.close();
        $("search-btn").focus();
      },
    });
  }

  /** What a row needs from the rest of the timeline to read well. */
  figures(ev) {
    if (ev.kind === "context.compacted") return { before: compactionBefore(this.tl.order, ev) };
    if (ev.kind === "reminder.cancelled") return { text: reminderText(this.tl.order, ev.payload && ev.payload.reminder_id) };
    return null;
  }

  /** The turn streaming now (its user message id), or null. */
  streaming() {
    let turn = null;
    for (const s of this.tl.streams.values()) turn = s.turn_id;
    return turn;
  }

  toast(text, tone = "") {
    const node = h("div", { class: `toast${tone ? ` toast-${tone}` : ""}`, text });
    $("toasts").appendChild(node);
    setTimeout(() => node.remove(), 5000);
  }

  // ---- boot and sign-in -----------------------------------------------------------

  async boot() {
    const session = ++this.session;
    try {
      this.state = await api.state();
    } catch (err) {
      if (session !== this.session) return;
      if (err instanceof HttpError && err.status === 401) return this.showSignIn();
      // The agent may be down (503 carries a neutral state): the timeline still works.
      this.state = (err instanceof HttpError && err.body && err.body.state) || null;
    }
    if (session !== this.session) return;
    this.showApp();
    this.reminders.refresh();
    this.usage.refresh(); // the topbar's spend today
    await this.hydrate(session);
    if (session !== this.session) return;
    this.connect();
  }

  showSignIn(message) {
    this.session += 1;
    if (this.voice) this.voice.stop();
    if (this.reminders) this.reminders.clear();
    if (this.memory) this.memory.clear();
    if (this.people) this.people.clear();
    if (this.commitments) this.commitments.clear();
    if (this.tasks) this.tasks.clear();
    if (this.notify) this.notify.signedOut(); // no session, no push subscription (the server's is gone)
    if (this.usage) this.usage.clear();
    if (this.wholeSearch) this.find.close();
    if (this.conn) this.conn.stop();
    this.conn = null;
    this.tl = createTimeline();
    this.pane.reset();
    $("boot").hidden = true;
    $("app").hidden = true;
    delete document.documentElement.dataset.shell;
    $("signin").hidden = false;
    const error = $("signin-error");
    error.hidden = !message;
    error.textContent = message || "";
    document.title = "Sign in · Delegate";
    $("token").focus();
  }

  showApp() {
    $("boot").hidden = true;
    $("signin").hidden = true;
    $("app").hidden = false;
    document.documentElement.dataset.shell = "app"; // the shell is the page: it never scrolls away (app.css)
    document.title = "Delegate";
    this.status.applyState(this.state);
    $("input").focus();
  }

  async signIn(event) {
    event.preventDefault();
    const input = $("token");
    const token = input.value.trim();
    const error = $("signin-error");
    if (!token) {
      error.textContent = "Enter your access token.";
      error.hidden = false;
      return;
    }
    $("signin-submit").disabled = true;
    try {
      await api.signIn(token);
      input.value = "";
      error.hidden = true;
      await this.boot();
    } catch (err) {
      error.textContent =
        err instanceof HttpError && (err.status === 401 || err.status === 403)
          ? "That token was not accepted."
          : "Could not reach Delegate. Try again in a moment.";
      error.hidden = false;
      input.select();
    } finally {
      $("signin-submit").disabled = false;
    }
  }

  // Signing out revokes the session on the server; only then is it over (the cookie is
  // HttpOnly, so this page cannot forget it by itself). A 401 means it already ended.
  async signOut(everywhere = false) {
    const button = $(everywhere ? "signout-all-btn" : "signout-btn");
    button.disabled = true;
    try {
      await (everywhere ? api.signOutEverywhere() : api.signOut());
    } catch (err) {
      if (!(err instanceof HttpError && err.status === 401)) {
        this.toast("Could not sign out: Delegate is not answering. Try again.", "warn");
        return;
      }
    } finally {
      button.disabled = false;
    }
    await dropLocal(); // the server deleted this browser's push subscription with the session
    this.notify.updateButton();
    this.showSignIn(everywhere ? "Signed out on every browser." : "");
  }

  async hydrate(session) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        const page = await api.timeline();
        if (session !== this.session) return;
        // Marks for bench/client.py: what a reload spends fetching and what rendering.
        performance.mark("delegate:timeline-fetched");
        mergePage(this.tl, page);
        this.pane.drawHistory();
        performance.mark("delegate:timeline-rendered");
        return;
      } catch (err) {
        if (session !== this.session) return;
        if (err instanceof HttpError && err.status === 401) return this.showSignIn();
        this.setConnStatus("reconnecting");
        await new Promise((r) => setTimeout(r, Math.min(8000, 500 * 2 ** attempt)));
        if (session !== this.session) return;
      }
    }
  }

  connect() {
    const scheme = location.protocol === "https:" ? "wss" : "ws";
    this.conn = new ChatConnection({
      url: `${scheme}://${location.host}/chat`,
      afterSeq: () => this.tl.maxSeq,
      onFrame: (frame) => this.onFrame(frame),
      onStatus: (status) => this.onConnStatus(status),
      probeReady: timelineReady,
      checkSignedIn: async () => {
        try {
          await api.state();
          return true;
        } catch (err) {
          return !(err instanceof HttpError && err.status === 401);
        }
      },
    });
    this.conn.start();
  }

  onConnStatus(status) {
    this.setConnStatus(status);
    if (status === "live") this.everLive = true;
    // The banner: while the bus is away after having been live (not on the first connect).
    $("outage").hidden = !(this.everLive && (status === "reconnecting" || status === "connecting"));
    document.body.dataset.conn = status;
    if (status === "signed-out") this.showSignIn("Your session ended. Sign in again.");
    this.status.updateControls();
  }

  setConnStatus(status) {
    const el = $("conn");
    el.dataset.status = status;
    $("conn-text").textContent = STATUS_TEXT[status] || status;
  }

  // ---- frames ---------------------------------------------------------------------

  onFrame(frame) {
    switch (frame.type) {
      case "event": {
        const fresh = addLive(this.tl, frame.event);
        for (const ev of fresh) {
          this.voice.committed(ev);
          this.reminders.eventArrived(ev);
          this.memory.eventArrived(ev);
          this.people.eventArrived(ev);
          this.commitments.eventArrived(ev);
          this.tasks.eventArrived(ev);
          this.usage.eventArrived(ev);
          this.notify.eventArrived(ev);
        }
        if (fresh.length) {
          if (frame.event.kind === "context.capsule") this.status.clearNotice();
          this.status.compactOutcome(null, frame.event);
          this.pane.eventsArrived(fresh);
        }
        break;
      }
      case "delta":
        if (applyDelta(this.tl, frame) && !this.pane.paintDelta(frame.turn_id)) this.pane.scheduleRender();
        break;
      case "state": {
        const { type, ...state } = frame;
        this.status.applyState(state);
        break;
      }
      case "live":
        this.status.showNotice(frame.event || {});
        this.status.compactOutcome(frame.event || {}, null);
        break;
      case "voice":
        this.voice.setVoiceState(frame.state);
        break;
      case "ack":
        if (frame.request === "stop" || frame.request === "regenerate") {
          this.composer.controlAnswered();
          break;
        }
        if (frame.client_msg_id) {
          updatePending(this.tl, frame.client_msg_id, { event_id: frame.event_id || null, status: "sent" });
          this.pane.scheduleRender();
        }
        break;
      case "ready":
        this.afterReady();
        break;
      case "error":
        if (frame.request === "message" && frame.client_msg_id && this.tl.pending.has(frame.client_msg_id)) {
          updatePending(this.tl, frame.client_msg_id, { status: "failed" });
          this.pane.scheduleRender();
        }
        if (frame.request === "stop" || frame.request === "regenerate") this.composer.controlAnswered();
        this.toast(ERROR_TEXT[frame.code] || frame.message || "Something went wrong.", "warn");
        break;
      default:
        break;
    }
  }

  async afterReady() {
    // Anything still unconfirmed may have been lost with the old socket: send it again
    // over HTTP (the same client_msg_id is stored once).
    for (const p of [...this.tl.pending.values()]) if (p.status !== "sent") this.composer.postMessage(p.client_msg_id);
    this.reminders.refresh(); // whatever changed while the socket was away
    this.usage.refresh();
    this.memory.reconnected();
    this.people.reconnected();
    this.commitments.reconnected();
    this.tasks.reconnected();
    try {
      this.status.applyState(await api.state());
    } catch {
      /* state frames will follow */
    }
  }

  exportTimeline(format) {
    const events = this.tl.order;
    const stamp = new Date().toISOString().replace(/[:.]/g, "-").slice(0, 19);
    const [text, type, ext] =
      format === "json" ? [toJSON(events), "application/json", "json"] : [toMarkdown(events), "text/markdown", "md"];
    const url = URL.createObjectURL(new Blob([text], { type: `${type};charset=utf-8` }));
    const a = h("a", { href: url, download: `delegate-timeline-${stamp}.${ext}`, hidden: true });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  }

  // ---- wiring: sign-in, the dialogs, the socket's wake-ups -------------------------

  /** A dialog that asks first: `onChoice` runs with its returnValue when it is not "" (cancelled). */
  dialog(buttonId, dialogId, onChoice) {
    const dialog = $(dialogId);
    $(buttonId).addEventListener("click", () => dialog.showModal());
    dialog.addEventListener("close", () => {
      if (dialog.returnValue) onChoice(dialog.returnValue);
      dialog.returnValue = "";
    });
  }

  wire() {
    $("signin-form").addEventListener("submit", (e) => this.signIn(e));
    this.dialog("export-btn", "export-dialog", (format) => (format === "md" || format === "json") && this.exportTimeline(format));
    const setup = $("setup-dialog");
    $("offline-badge").addEventListener("click", () => setup.showModal());
    $("signout-btn").addEventListener("click", () => this.signOut());
    // Signing out every browser is not undone by a click: it asks first.
    this.dialog("signout-all-btn", "signout-all-dialog", (choice) => choice === "out" && this.signOut(true));
    this.dialog("end-btn", "end-dialog", (choice) => choice === "end" && this.status.endConversation());
    window.addEventListener("online", () => this.conn && this.conn.reconnectNow("online"));
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && this.conn) this.conn.reconnectNow("focus");
    });
    window.addEventListener("focus", () => this.conn && this.conn.reconnectNow("focus"));
    // Span time ranges ("Tue 14:05–14:30") age: refresh them now and then.
    setInterval(() => this.tl.order.length && this.pane.scheduleRender(true), 60000);
  }
}

const app = new App();
window.__delegate = app; // a handle for debugging and browser tests; holds no secrets
registerWorker(); // the offline shell and Web Push; it never caches the API
app.boot();
