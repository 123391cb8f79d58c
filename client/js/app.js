// Delegate in the browser: sign-in, the one relationship timeline, the context controls.

import { api, HttpError } from "./api.js";
import { ChatConnection } from "./connection.js";
import { h, icon } from "./dom.js";
import { formatNumber, formatPercent, formatTime, fullTime } from "./format.js";
import { TimelineView } from "./render.js";
import {
  addEvents,
  addPending,
  applyDelta,
  buildView,
  createTimeline,
  mergePage,
  updatePending,
} from "./timeline.js";

const $ = (id) => document.getElementById(id);

const STATUS_TEXT = {
  connecting: "Connecting…",
  live: "Live",
  reconnecting: "Reconnecting…",
  "signed-out": "Signed out",
  stopped: "Offline",
};

// A message sent over the socket that is neither acknowledged nor committed by then is
// re-sent over HTTP with the same client_msg_id (stored once either way).
const WS_CONFIRM_MS = 4000;
const STICK_PX = 80;

function newClientId() {
  if (globalThis.crypto && typeof crypto.randomUUID === "function") {
    try {
      return crypto.randomUUID();
    } catch {
      /* insecure context: fall through */
    }
  }
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const hex = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

class App {
  constructor() {
    this.tl = createTimeline();
    this.view = new TimelineView($("timeline"), { onRetry: (cid) => this.postMessage(cid) });
    this.conn = null;
    this.state = null;
    this.compactInFlight = false;
    this.loadingOlder = false;
    this.renderQueued = false;
    this.forceBottom = false;
    this.freshLive = [];
    this.shownBlocks = 0; // blocks on screen after the last render
    this.noticeTimer = null;
    this.session = 0; // bumps on every sign-in/out so stale async work is dropped
    this.wire();
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
    await this.hydrate(session);
    if (session !== this.session) return;
    this.connect();
  }

  showSignIn(message) {
    this.session += 1;
    if (this.conn) this.conn.stop();
    this.conn = null;
    this.tl = createTimeline();
    this.view.clear();
    this.shownBlocks = 0;
    $("boot").hidden = true;
    $("app").hidden = true;
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
    document.title = "Delegate";
    this.applyState(this.state);
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
    this.showSignIn(everywhere ? "Signed out on every browser." : "");
  }

  async hydrate(session) {
    for (let attempt = 0; ; attempt += 1) {
      try {
        const page = await api.timeline();
        if (session !== this.session) return;
        mergePage(this.tl, page);
        this.forceBottom = true;
        this.renderNow();
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
    if (status === "signed-out") this.showSignIn("Your session ended. Sign in again.");
    this.updateControls();
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
        const fresh = addEvents(this.tl, [frame.event]);
        if (fresh.length) {
          this.freshLive.push(...fresh);
          if (frame.event.kind === "context.capsule") this.clearNotice();
          this.scheduleRender();
        }
        break;
      }
      case "delta":
        if (applyDelta(this.tl, frame)) this.scheduleRender();
        break;
      case "state": {
        const { type, ...state } = frame;
        this.applyState(state);
        break;
      }
      case "live":
        this.showNotice(frame.event || {});
        break;
      case "ack":
        if (frame.client_msg_id) {
          updatePending(this.tl, frame.client_msg_id, { event_id: frame.event_id || null, status: "sent" });
          this.scheduleRender();
        }
        break;
      case "ready":
        this.afterReady();
        break;
      case "error":
        if (frame.request === "message" && frame.client_msg_id && this.tl.pending.has(frame.client_msg_id)) {
          updatePending(this.tl, frame.client_msg_id, { status: "failed" });
          this.scheduleRender();
        }
        this.toast(frame.code === "busy" ? "Delegate is busy right now." : frame.message || "Something went wrong.", "warn");
        break;
      default:
        break;
    }
  }

  async afterReady() {
    // Anything still unconfirmed may have been lost with the old socket: send it again
    // over HTTP (the same client_msg_id is stored once).
    for (const p of [...this.tl.pending.values()]) if (p.status !== "sent") this.postMessage(p.client_msg_id);
    try {
      this.applyState(await api.state());
    } catch {
      /* state frames will follow */
    }
  }

  // ---- rendering ------------------------------------------------------------------

  scheduleRender() {
    if (this.renderQueued) return;
    this.renderQueued = true;
    const run = () => {
      if (!this.renderQueued) return;
      this.renderNow();
    };
    requestAnimationFrame(run);
    setTimeout(run, 100); // rAF pauses in background tabs; the timeline must not
  }

  renderNow() {
    this.renderQueued = false;
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX;
    const blocks = buildView(this.tl);
    this.view.render(blocks);
    // What is shown, not what is held: hidden bookkeeping alone (the agent's session start on a
    // fresh system) is still "nothing here yet". Pending bubbles and streams are blocks too.
    this.shownBlocks = blocks.length;
    $("empty").hidden = blocks.length > 0;
    this.updateOlder();
    const fresh = this.freshLive;
    this.freshLive = [];
    if (this.forceBottom || atBottom) {
      scroller.scrollTop = scroller.scrollHeight;
      $("jump-btn").hidden = true;
    } else if (fresh.some((ev) => ev.kind === "message" || ev.kind === "turn.failed")) {
      $("jump-btn").hidden = false;
    }
    this.forceBottom = false;
    this.announce(fresh);
  }

  announce(fresh) {
    const said = fresh.filter((ev) => (ev.kind === "message" && ev.role === "assistant") || ev.kind === "turn.failed");
    if (!said.length) return;
    const ev = said[said.length - 1];
    const text = ev.kind === "turn.failed" ? `Delegate couldn’t answer: ${ev.payload.message || ""}` : `Delegate: ${ev.payload.text || ""}`;
    $("announcer").textContent = text.slice(0, 400);
  }

  updateOlder() {
    const older = $("older-btn");
    older.hidden = !this.tl.hasOlder;
    older.disabled = this.loadingOlder;
    older.textContent = this.loadingOlder ? "Loading…" : "Load older activity";
    $("older-end").hidden = this.tl.hasOlder || !this.shownBlocks;
  }

  async loadOlder() {
    if (this.loadingOlder || !this.tl.hasOlder) return;
    const session = this.session;
    this.loadingOlder = true;
    this.updateOlder();
    try {
      const page = await api.timeline(this.tl.cursor);
      if (session !== this.session) return;
      const scroller = $("scroller");
      // Keep what the person is reading exactly where it is: grow the scroll offset by
      // whatever was inserted above it.
      const height = scroller.scrollHeight;
      const top = scroller.scrollTop;
      mergePage(this.tl, page, { older: true });
      this.renderNow();
      scroller.scrollTop = top + (scroller.scrollHeight - height);
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.showSignIn();
      this.toast("Could not load older activity.", "warn");
    } finally {
      this.loadingOlder = false;
      this.updateOlder();
    }
  }

  // ---- sending --------------------------------------------------------------------

  send() {
    const input = $("input");
    const text = input.value;
    if (!text.trim()) return;
    const cid = newClientId();
    addPending(this.tl, { client_msg_id: cid, text });
    input.value = "";
    this.autosize();
    this.forceBottom = true;
    this.renderNow();
    if (this.conn && this.conn.status === "live" && this.conn.send({ type: "message", text, client_msg_id: cid })) {
      setTimeout(() => {
        const p = this.tl.pending.get(cid);
        if (p && p.status === "sending") this.postMessage(cid);
      }, WS_CONFIRM_MS);
    } else {
      this.postMessage(cid);
    }
  }

  async postMessage(cid) {
    const p = this.tl.pending.get(cid);
    if (!p || p.posting) return;
    p.posting = true;
    updatePending(this.tl, cid, { status: "sending" });
    this.scheduleRender();
    try {
      const res = await api.send(p.text, cid);
      updatePending(this.tl, cid, { status: "sent", event_id: (res && res.event_id) || null });
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.showSignIn("Your session ended. Sign in again.");
      updatePending(this.tl, cid, { status: "failed" });
      this.toast("Your message was not sent. Use Retry to try again.", "warn");
    } finally {
      p.posting = false;
      this.scheduleRender();
    }
  }

  autosize() {
    const input = $("input");
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, Math.round(window.innerHeight * 0.4))}px`;
  }

  // ---- topbar: state, compaction, end ---------------------------------------------

  applyState(state) {
    if (state && typeof state === "object") this.state = state;
    const s = this.state;
    const usage = (s && s.usage) || null;
    const pct = usage && Number.isFinite(usage.percent) ? usage.percent : null;
    $("usage-text").textContent = pct === null ? "–" : formatPercent(pct);
    const bar = $("usage-bar");
    bar.style.width = `${pct === null ? 0 : Math.max(0, Math.min(100, pct))}%`;
    bar.dataset.level = pct === null ? "" : pct >= 90 ? "high" : pct >= 60 ? "mid" : "low";
    $("usage").title = usage
      ? `${formatNumber(usage.input_tokens)} of ${formatNumber(usage.compact_threshold)} input tokens before automatic compaction`
      : "Context usage unknown";
    const capsule = $("capsule");
    const active = !!(s && s.capsule && s.capsule.active);
    capsule.dataset.active = String(active);
    capsule.textContent = active ? "Capsule active" : "No capsule";
    capsule.title = active && s.capsule.updated_at ? `Continuity capsule refreshed ${fullTime(s.capsule.updated_at)}` : "No continuity capsule yet";
    const compacted = $("compacted");
    compacted.textContent = s && s.last_compacted_at ? `Compacted ${formatTime(s.last_compacted_at)}` : "Not compacted yet";
    compacted.title = s && s.last_compacted_at ? fullTime(s.last_compacted_at) : "";
    $("offline-badge").hidden = !(s && s.offline_model);
    this.updateControls();
  }

  updateControls() {
    const s = this.state;
    const btn = $("compact-btn");
    const working = !!(s && (s.busy || s.compacting));
    btn.disabled = !s || working || this.compactInFlight;
    $("compact-label").textContent = this.compactInFlight || (s && s.compacting) ? "Compacting…" : "Compact now";
    btn.title = working ? "Disabled while a response or compaction is running" : "Compact the model's working context now";
    btn.setAttribute("aria-busy", String(this.compactInFlight || !!(s && s.compacting)));
  }

  async compact() {
    if (this.compactInFlight) return;
    this.compactInFlight = true;
    this.updateControls();
    try {
      await api.compact();
      this.toast("Compaction requested.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 409) this.toast("Busy: a response or compaction is running.", "warn");
      else if (err instanceof HttpError && err.status === 401) return this.showSignIn();
      else this.toast("Compaction could not start.", "warn");
    } finally {
      this.compactInFlight = false;
      this.updateControls();
    }
  }

  async endConversation() {
    try {
      await api.endConversation();
      this.toast("Conversation ended. Your timeline stays.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.showSignIn();
      this.toast(err instanceof HttpError && err.status === 409 ? "Busy: try again when Delegate is idle." : "Could not end the conversation.", "warn");
    }
  }

  showNotice(ev) {
    if (ev.kind !== "context.capsule") return;
    const el = $("live-notice");
    clearTimeout(this.noticeTimer);
    if (ev.status === "started") {
      el.textContent = "Refreshing capsule…";
      el.dataset.tone = "";
      this.noticeTimer = setTimeout(() => this.clearNotice(), 60000);
    } else if (ev.status === "failed") {
      el.textContent = "Capsule refresh failed";
      el.dataset.tone = "warn";
      el.title = ev.detail || "";
      this.noticeTimer = setTimeout(() => this.clearNotice(), 10000);
    } else {
      return;
    }
    el.hidden = false;
  }

  clearNotice() {
    clearTimeout(this.noticeTimer);
    $("live-notice").hidden = true;
  }

  toast(text, tone = "") {
    const node = h("div", { class: `toast${tone ? ` toast-${tone}` : ""}`, text });
    $("toasts").appendChild(node);
    setTimeout(() => node.remove(), 5000);
  }

  // ---- wiring ---------------------------------------------------------------------

  wire() {
    for (const slot of document.querySelectorAll(".btn-icon[data-icon]")) slot.replaceWith(icon(slot.dataset.icon, "icon btn-icon"));
    $("signin-form").addEventListener("submit", (e) => this.signIn(e));
    $("composer").addEventListener("submit", (e) => {
      e.preventDefault();
      this.send();
    });
    const input = $("input");
    input.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && !e.shiftKey && !e.isComposing && !e.altKey && !e.ctrlKey && !e.metaKey) {
        e.preventDefault();
        this.send();
      }
    });
    input.addEventListener("input", () => this.autosize());
    $("older-btn").addEventListener("click", () => this.loadOlder());
    $("compact-btn").addEventListener("click", () => this.compact());
    $("signout-btn").addEventListener("click", () => this.signOut());
    $("signout-all-btn").addEventListener("click", () => this.signOut(true));
    const dialog = $("end-dialog");
    $("end-btn").addEventListener("click", () => dialog.showModal());
    dialog.addEventListener("close", () => {
      if (dialog.returnValue === "end") this.endConversation();
      dialog.returnValue = "";
    });
    const scroller = $("scroller");
    scroller.addEventListener("scroll", () => {
      if (scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX) $("jump-btn").hidden = true;
    });
    $("jump-btn").addEventListener("click", () => {
      scroller.scrollTop = scroller.scrollHeight;
      $("jump-btn").hidden = true;
      input.focus();
    });
    window.addEventListener("online", () => this.conn && this.conn.reconnectNow());
    // Span time ranges ("Tue 14:05–14:30") age: refresh them now and then.
    setInterval(() => this.tl.order.length && this.scheduleRender(), 60000);
  }
}

const app = new App();
window.__delegate = app; // a handle for debugging and browser tests; holds no secrets
app.boot();
