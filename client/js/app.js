// Delegate in the browser: sign-in, the one relationship timeline, the context controls.

import { api, HttpError } from "./api.js";
import { ChatConnection } from "./connection.js";
import { h, icon } from "./dom.js";
import { formatNumber, formatPercent, formatTime, fullTime } from "./format.js";
import { compactionBefore, contextFigures } from "./context.js";
import { TimelineView, updateStream } from "./render.js";
import { mergeDelivery } from "./channels.js";
import { searchEvents, toJSON, toMarkdown } from "./search.js";
import { VoiceUI } from "./voice-ui.js";
import { RemindersPanel } from "./reminders-ui.js";
import { PeoplePanel } from "./people-ui.js";
import { CommitmentsPanel } from "./commitments-ui.js";
import { UsagePanel } from "./usage-ui.js";
import { reminderText } from "./reminders.js";
import { MemoryPanel, TimelineSearch } from "./memory-ui.js";
import { TasksPanel } from "./tasks-ui.js";
import { Notifier } from "./notify.js";
import { dropLocal, registerWorker } from "./push.js";
import {
  addLive,
  addPending,
  applyDelta,
  buildView,
  createTimeline,
  drawStart,
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
const ERROR_TEXT = {
  busy: "Delegate is busy right now.",
  not_found: "That answer is no longer there.",
  not_last: "Only the last answer can be regenerated, and only the last message edited.",
};
const STICK_PX = 80;
const SPOKEN = new Set(["phone", "browser_voice"]);
const JUMP_MARK_MS = 2500; // how long a jumped-to event stays marked
// A reload draws the blocks holding the newest this many items first, then older ones in
// chunks of as many per task: 5,000 events drawn at once kept the page busy for seconds.
const DRAW_CHUNK_ITEMS = 150;

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
    this.view = new TimelineView($("timeline"), {
      onRetry: (cid) => this.postMessage(cid),
      onCopy: (text, button) => this.copy(text, button),
      onRegenerate: (ev) => this.regenerate(ev),
      onEdit: (ev) => this.startEdit(ev),
      figures: (ev) => this.figures(ev),
      onOpenTask: (id) => this.tasks.open(id),
    });
    this.editing = null; // the user message being edited (its new version supersedes it)
    this.search = { query: "", hits: [], index: -1 };
    this.everLive = false;
    this.conn = null;
    this.state = null;
    this.compactInFlight = false;
    this.loadingOlder = false;
    this.renderQueued = false;
    this.forceBottom = false;
    this.undrawn = 0; // the oldest blocks not drawn yet (a reload draws the newest first)
    this.drawn = []; // the blocks of the last render
    this.drawTimer = null;
    this.freshLive = [];
    this.shownBlocks = 0; // blocks on screen after the last render
    this.noticeTimer = null;
    this.session = 0; // bumps on every sign-in/out so stale async work is dropped
    this.wire();
    this.voice = new VoiceUI(); // after wire(): the icons are in place
    this.reminders = new RemindersPanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
    });
    this.memory = new MemoryPanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
      jumpTo: (id) => this.jumpToEvent(id),
    });
    this.people = new PeoplePanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
      jumpTo: (id) => this.jumpToEvent(id),
    });
    this.commitments = new CommitmentsPanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
    });
    this.tasks = new TasksPanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
    });
    this.notify = new Notifier({ toast: (text, tone) => this.toast(text, tone), button: $("notify-btn") });
    this.usage = new UsagePanel({
      onUnauthorized: () => this.showSignIn(),
      toast: (text, tone) => this.toast(text, tone),
      jumpTo: (id) => this.jumpToEvent(id),
    });
    this.wholeSearch = new TimelineSearch({
      onUnauthorized: () => this.showSignIn(),
      jumpTo: (id) => this.jumpToEvent(id),
      close: () => {
        this.closeSearch();
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
    if (this.wholeSearch) this.closeSearch();
    if (this.conn) this.conn.stop();
    this.conn = null;
    this.tl = createTimeline();
    this.view.clear();
    clearTimeout(this.drawTimer); // the older chunks of a signed-out session are not drawn
    this.drawTimer = null;
    this.undrawn = 0;
    this.drawn = [];
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
        this.forceBottom = true;
        clearTimeout(this.drawTimer);
        this.undrawn = drawStart(buildView(this.tl), DRAW_CHUNK_ITEMS);
        this.renderNow();
        if (this.undrawn) this.drawTimer = setTimeout(() => this.drawOlderChunk(), 0);
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
      // Ready for the timeline: the gateway answers and NATS and the ledger are there (the
      // agent may still be starting: the timeline works without it).
      probeReady: async () => {
        try {
          const res = await fetch("/readyz", { cache: "no-store", credentials: "omit" });
          if (res.ok) return true;
          const body = await res.json().catch(() => null);
          const missing = (body && Array.isArray(body.missing) && body.missing) || ["nats"];
          return !missing.includes("nats") && !missing.includes("ledger");
        } catch {
          return false;
        }
      },
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
          this.freshLive.push(...fresh);
          if (frame.event.kind === "context.capsule") this.clearNotice();
          this.compactOutcome(null, frame.event);
          this.scheduleRender();
        }
        break;
      }
      case "delta":
        if (applyDelta(this.tl, frame) && !this.paintDelta(frame.turn_id)) this.scheduleRender();
        break;
      case "state": {
        const { type, ...state } = frame;
        this.applyState(state);
        break;
      }
      case "live":
        this.showNotice(frame.event || {});
        this.compactOutcome(frame.event || {}, null);
        break;
      case "voice":
        this.voice.setVoiceState(frame.state);
        break;
      case "ack":
        if (frame.request === "stop" || frame.request === "regenerate") {
          this.controlInFlight = null;
          this.updateControls();
          break;
        }
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
        if (frame.request === "stop" || frame.request === "regenerate") {
          this.controlInFlight = null;
          this.updateControls();
        }
        this.toast(ERROR_TEXT[frame.code] || frame.message || "Something went wrong.", "warn");
        break;
      default:
        break;
    }
  }

  async afterReady() {
    // Anything still unconfirmed may have been lost with the old socket: send it again
    // over HTTP (the same client_msg_id is stored once).
    for (const p of [...this.tl.pending.values()]) if (p.status !== "sent") this.postMessage(p.client_msg_id);
    this.reminders.refresh(); // whatever changed while the socket was away
    this.usage.refresh();
    this.memory.reconnected();
    this.people.reconnected();
    this.commitments.reconnected();
    this.tasks.reconnected();
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

  /**
   * The common delta: more text for an answer already streaming on the page. Only its bubble
   * changes, so only it is updated, at once, instead of rebuilding the whole view (which costs
   * in proportion to the loaded history). False when a full render is needed.
   */
  paintDelta(turnId) {
    if (this.renderQueued) return false; // a full render is coming anyway
    const s = this.tl.streams.get(turnId);
    const node = s && document.querySelector(`#timeline article.streaming[data-turn-id="${CSS.escape(turnId)}"]`);
    if (!node || node._attempt !== s.attempt) return false;
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX;
    updateStream(node, { type: "stream", stream: s });
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
    return true;
  }

  renderNow() {
    this.renderQueued = false;
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX;
    const blocks = buildView(this.tl);
    this.markLast(blocks);
    if (this.search.query) this.undrawn = 0; // search marks matches among the drawn nodes
    this.view.render(this.undrawn ? blocks.slice(Math.min(this.undrawn, blocks.length)) : blocks);
    this.drawn = blocks;
    this.applyState(null);
    if (this.search.query) this.runSearch(false);
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

  /**
   * Draw the next older chunk above what is drawn, keeping what the person reads where it is
   * (at the bottom it stays at the bottom).
   */
  drawOlderChunk() {
    this.drawTimer = null;
    if (!this.undrawn) return;
    if (this.renderQueued) this.renderNow(); // the blocks of the last render are current
    // The last render's blocks: building the view again for every chunk would cost as much as
    // the chunk itself on a long history.
    const blocks = this.drawn;
    this.undrawn = drawStart(blocks.slice(0, Math.min(this.undrawn, blocks.length)), DRAW_CHUNK_ITEMS);
    this.keepPosition(() => this.view.render(blocks.slice(this.undrawn)));
    if (this.undrawn) this.drawTimer = setTimeout(() => this.drawOlderChunk(), 0);
  }

  /** Everything drawn now: what looks for an event's node (search, a jump, "Load older") needs it. */
  drawAll() {
    clearTimeout(this.drawTimer);
    this.drawTimer = null;
    if (!this.undrawn) return;
    this.undrawn = 0;
    this.keepPosition(() => this.renderNow());
  }

  /** Run `change` (which inserts above the reading position) and grow the scroll offset by what it added. */
  keepPosition(change) {
    const scroller = $("scroller");
    const height = scroller.scrollHeight;
    const top = scroller.scrollTop;
    const atBottom = height - top - scroller.clientHeight < STICK_PX;
    change();
    // The scroller does no scroll anchoring of its own (overflow-anchor: none): both cases are ours.
    scroller.scrollTop = atBottom ? scroller.scrollHeight : top + (scroller.scrollHeight - height);
  }

  /**
   * Scroll the timeline (and only it) so `node` is in its middle. scrollIntoView would scroll
   * every ancestor too, the page's own overflow-hidden shell included, moving the top bar and
   * the composer off screen on a phone.
   */
  centerInTimeline(node) {
    const scroller = $("scroller");
    const box = scroller.getBoundingClientRect();
    const r = node.getBoundingClientRect();
    scroller.scrollTop += r.top - box.top - (box.height - r.height) / 2;
  }

  /** Regenerate goes on the last answer, edit-and-resend on the last message you sent. */
  markLast(blocks) {
    const flat = [];
    for (const b of blocks) {
      if (b.type === "span") flat.push(...b.items);
      else flat.push(b);
    }
    let lastUser = null;
    let lastAnswer = null;
    let lastMsg = null;
    for (const item of flat) {
      if (item.type === "pending" || item.type === "stream") lastMsg = item;
      if (item.type !== "event") continue;
      const ev = item.event;
      if (ev.kind === "message" || ev.kind === "turn.failed") lastMsg = item;
      if (ev.kind === "message" && ev.role === "user" && !item.superseded) lastUser = item;
      if (ev.kind === "message" && ev.role === "assistant" && !item.superseded) lastAnswer = item;
    }
    // A spoken turn was said, not typed: it has no Edit, and its answer no Regenerate.
    const spoken = (item) => item && item.event && SPOKEN.has(item.event.channel);
    if (spoken(lastUser)) lastUser = null;
    if (spoken(lastAnswer)) lastAnswer = null;
    const idle = !this.streaming() && this.tl.pending.size === 0;
    if (lastAnswer && lastMsg === lastAnswer && idle && lastAnswer.event.parent_id) lastAnswer.canRegenerate = true;
    if (lastUser && idle && (lastMsg === lastUser || (lastAnswer && lastAnswer.event.parent_id === lastUser.event.id) || (lastMsg && lastMsg.event && lastMsg.event.parent_id === lastUser.event.id))) {
      lastUser.canEdit = true;
    }
  }

  /** The turn streaming now (its user message id), or null. */
  streaming() {
    let turn = null;
    for (const s of this.tl.streams.values()) turn = s.turn_id;
    return turn;
  }

  announce(fresh) {
    // A delivery that went wrong is said out loud too: its mark on the message may be off screen.
    const bad = fresh.filter((ev) => ev.kind === "delivery" && ["failed", "undelivered", "canceled"].includes(ev.payload && ev.payload.status));
    const said = fresh.filter((ev) => (ev.kind === "message" && ev.role === "assistant") || ev.kind === "turn.failed");
    if (!said.length && bad.length) {
      const d = mergeDelivery(bad);
      $("announcer").textContent = `${d.title}`.slice(0, 400);
      return;
    }
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

  /** One older page; a call while one loads waits for that one. */
  loadOlder() {
    if (!this.olderRun) this.olderRun = this.fetchOlder().finally(() => (this.olderRun = null));
    return this.olderRun;
  }

  async fetchOlder() {
    if (this.loadingOlder || !this.tl.hasOlder) return;
    const session = this.session;
    this.loadingOlder = true;
    this.updateOlder();
    try {
      const page = await api.timeline(this.tl.cursor);
      if (session !== this.session) return;
      this.drawAll();
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

  /**
   * Show event `id` on the timeline (a memory's source, a whole-timeline search match),
   * paging back through history until it is loaded. False when it cannot be shown.
   */
  async jumpToEvent(id) {
    if (!id) return false;
    const session = this.session;
    while (!this.tl.byId.has(id) && this.tl.hasOlder) {
      const before = this.tl.cursor;
      await this.loadOlder();
      if (session !== this.session) return false;
      if (this.tl.cursor === before) return false; // an error: loadOlder told the person
    }
    if (this.renderQueued) this.renderNow();
    this.drawAll();
    const node = this.tl.byId.has(id) ? document.querySelector(`#timeline [data-event-id="${CSS.escape(id)}"]`) : null;
    if (!node) return false; // the caller says so where the person looks
    // Open whatever folds it away: its span, its activity line.
    for (let p = node.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    this.centerInTimeline(node);
    for (const n of document.querySelectorAll("#timeline .jump-target")) n.classList.remove("jump-target");
    node.classList.add("jump-target");
    clearTimeout(this.jumpTimer);
    this.jumpTimer = setTimeout(() => node.classList.remove("jump-target"), JUMP_MARK_MS);
    $("announcer").textContent = "Shown on the timeline.";
    return true;
  }

  // ---- sending --------------------------------------------------------------------

  send() {
    const input = $("input");
    const text = input.value;
    if (!text.trim()) return;
    const cid = newClientId();
    const supersedes = this.editing ? this.editing.id : null;
    addPending(this.tl, { client_msg_id: cid, text });
    if (supersedes) this.tl.pending.get(cid).supersedes = supersedes;
    this.cancelEdit(false);
    input.value = "";
    this.autosize();
    this.forceBottom = true;
    this.renderNow();
    const frame = { type: "message", text, client_msg_id: cid };
    if (supersedes) frame.supersedes = supersedes;
    if (this.conn && this.conn.status === "live" && this.conn.send(frame)) {
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
      const res = await api.send(p.text, cid, p.supersedes);
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
    if (state && typeof state === "object") {
      this.state = state;
      // The system's call, when the gateway reports it: every tab shows it.
      if ("voice" in state && this.voice) this.voice.setVoiceState(state.voice);
    }
    const s = this.state;
    // One source for the meter, the chips and the rows: the timeline's own events, with the
    // state's figures where the loaded timeline has none.
    const f = contextFigures(this.tl.order, s);
    const usage = f.usage;
    const pct = usage && Number.isFinite(usage.percent) ? usage.percent : null;
    $("usage-text").textContent = pct === null ? "–" : formatPercent(pct);
    const bar = $("usage-bar");
    bar.style.width = `${pct === null ? 0 : Math.max(0, Math.min(100, pct))}%`;
    bar.dataset.level = pct === null ? "" : pct >= 90 ? "high" : pct >= 60 ? "mid" : "low";
    const meter = $("usage");
    meter.setAttribute("aria-valuenow", String(pct === null ? 0 : Math.round(pct)));
    meter.title =
      usage && usage.compact_threshold
        ? `Context used: this conversation takes ${formatNumber(usage.input_tokens)} of the ${formatNumber(usage.compact_threshold)} tokens the model reads at once. At 100% Delegate summarizes older messages automatically; nothing is deleted.`
        : "Context used: how much of what the model reads at once this conversation takes. Unknown until Delegate answers.";
    meter.setAttribute("aria-valuetext", pct === null ? "unknown" : `${formatPercent(pct)} full`);
    const capsule = $("capsule");
    capsule.dataset.active = String(f.capsule.active);
    capsule.textContent = f.capsule.active ? "What I keep in mind: ready" : "Nothing kept in mind yet";
    capsule.title = f.capsule.active
      ? `What Delegate keeps in mind for the next session${f.capsule.updated_at ? `, updated ${fullTime(f.capsule.updated_at)}` : ""}`
      : "As the conversation grows, Delegate notes what to keep in mind for next time";
    const compacted = $("compacted");
    const when = f.compaction ? f.compaction.ts : null;
    compacted.textContent = when ? `Older messages summarized ${formatTime(when)}` : "Nothing summarized yet";
    compacted.title = when
      ? `In this conversation, older messages were summarized to make room (${fullTime(when)}). The full history stays on the timeline.`
      : "In this conversation, older messages have not needed summarizing yet";
    $("offline-badge").hidden = !(s && s.offline_model);
    this.updateControls();
  }

  updateControls() {
    const s = this.state;
    const btn = $("compact-btn");
    const working = !!(s && (s.busy || s.compacting));
    btn.disabled = !s || working || this.compactInFlight;
    $("compact-label").textContent = this.compactInFlight || (s && s.compacting) ? "Compacting…" : "Compact now";
    btn.title = working ? "Disabled while a response or compaction is running" : "Summarize older messages now, so the conversation takes less context";
    btn.setAttribute("aria-busy", String(this.compactInFlight || !!(s && s.compacting)));
    // Actions that need the bus wait while it is away.
    const away = !this.conn || this.conn.status !== "live";
    if (away) {
      btn.disabled = true;
      btn.title = "Paused while reconnecting";
    }
    $("end-btn").disabled = away;
    const turn = this.streaming();
    const stop = $("stop-btn");
    // The Stop button goes away with the answer: focus on it moves to the composer, not the page.
    if (!turn && !stop.hidden && document.activeElement === stop) queueMicrotask(() => $("input").focus());
    stop.hidden = !turn;
    stop.disabled = away || this.controlInFlight === "stop";
    stop.dataset.turnId = turn || "";
    for (const b of document.querySelectorAll("#timeline .act-regenerate, #timeline .act-edit")) b.disabled = away || !!turn;
  }

  // ---- chat controls --------------------------------------------------------------

  stop() {
    const turn = this.streaming();
    if (!turn || !this.conn) return;
    if (this.conn.send({ type: "stop", turn_id: turn })) {
      // Stop disables itself (and then goes): focus goes on to the composer, not the page.
      if (document.activeElement === $("stop-btn")) $("input").focus();
      this.controlInFlight = "stop";
      this.updateControls();
    } else this.toast("Not connected: try again in a moment.", "warn");
  }

  regenerate(ev) {
    if (!ev || !ev.parent_id || !this.conn) return;
    if (!this.conn.send({ type: "regenerate", turn_id: ev.parent_id })) {
      this.toast("Not connected: try again in a moment.", "warn");
      return;
    }
    this.controlInFlight = "regenerate";
    this.forceBottom = true;
    this.updateControls();
  }

  startEdit(ev) {
    if (!ev) return;
    this.editing = ev;
    const input = $("input");
    input.value = (ev.payload && ev.payload.text) || "";
    $("edit-bar").hidden = false;
    $("send-btn").textContent = "Resend";
    this.autosize();
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }

  cancelEdit(clear = true) {
    if (!this.editing) return;
    this.editing = null;
    $("edit-bar").hidden = true;
    $("send-btn").textContent = "Send";
    if (clear) {
      $("input").value = "";
      this.autosize();
    }
  }

  async copy(text, button) {
    let ok = false;
    try {
      await navigator.clipboard.writeText(text);
      ok = true;
    } catch {
      // No clipboard API (an insecure origin): the old way, through a selected textarea.
      const area = h("textarea", { class: "sr-only", "aria-hidden": "true" });
      area.value = text;
      document.body.appendChild(area);
      area.select();
      try {
        ok = document.execCommand("copy");
      } catch {
        ok = false;
      }
      area.remove();
    }
    if (button) {
      button.dataset.copied = ok ? "true" : "false";
      const label = button.querySelector(".msg-action-label") || button;
      const was = button.dataset.label || label.textContent;
      button.dataset.label = was;
      label.textContent = ok ? "Copied" : "Copy failed";
      clearTimeout(button._copyTimer);
      button._copyTimer = setTimeout(() => {
        label.textContent = was;
        delete button.dataset.copied;
      }, 2000);
    }
    $("announcer").textContent = ok ? "Copied to the clipboard" : "Could not copy";
  }

  // ---- search and export ----------------------------------------------------------

  openSearch() {
    $("search-bar").hidden = false;
    $("search-btn").setAttribute("aria-expanded", "true");
    $("search-input").focus();
    $("search-input").select();
    this.markHits();
  }

  closeSearch() {
    $("search-bar").hidden = true;
    $("search-btn").setAttribute("aria-expanded", "false");
    $("search-input").value = "";
    this.search = { query: "", hits: [], index: -1 };
    this.markHits();
    this.wholeSearch.clear();
  }

  runSearch(jump = true) {
    const query = $("search-input").value.trim();
    if (query) this.drawAll(); // marks and jumps find matches among the drawn nodes
    const hits = searchEvents(this.tl.order, query);
    const prevId = this.search.hits[this.search.index] && this.search.hits[this.search.index].id;
    let index = hits.findIndex((e) => e.id === prevId);
    if (index < 0) index = hits.length - 1; // the newest match first
    this.search = { query, hits, index };
    this.markHits();
    if (jump) this.showHit();
  }

  stepSearch(d) {
    const n = this.search.hits.length;
    if (!n) return;
    this.search.index = (this.search.index + d + n) % n;
    this.markHits();
    this.showHit();
  }

  markHits() {
    const { query, hits, index } = this.search;
    for (const n of document.querySelectorAll("#timeline .search-hit")) n.classList.remove("search-hit", "search-current");
    const ids = new Set(hits.map((e) => e.id));
    for (const n of document.querySelectorAll("#timeline [data-event-id]")) if (ids.has(n.dataset.eventId)) n.classList.add("search-hit");
    const current = hits[index];
    if (current) {
      const node = document.querySelector(`#timeline [data-event-id="${CSS.escape(current.id)}"]`);
      if (node) node.classList.add("search-current");
    }
    const more = this.tl.hasOlder ? " (loaded so far)" : "";
    $("search-count").textContent = !query ? "" : hits.length ? `${index + 1} of ${hits.length}${more}` : `No matches${more}`;
    $("search-all").hidden = !this.tl.hasOlder;
    $("search-prev").disabled = hits.length < 2;
    $("search-next").disabled = hits.length < 2;
  }

  showHit() {
    const ev = this.search.hits[this.search.index];
    if (!ev) return;
    const node = document.querySelector(`#timeline [data-event-id="${CSS.escape(ev.id)}"]`);
    if (!node) return;
    // Open whatever folds it away: its span, its activity line.
    for (let p = node.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    this.centerInTimeline(node);
  }

  async loadAll() {
    const btn = $("search-all");
    btn.disabled = true;
    btn.textContent = "Loading history…";
    try {
      while (this.tl.hasOlder) {
        const before = this.tl.cursor;
        await this.loadOlder();
        if (this.tl.cursor === before) break; // an error: loadOlder told the person
      }
    } finally {
      btn.disabled = false;
      btn.textContent = "Search all history";
      this.runSearch();
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

  async compact() {
    if (this.compactInFlight) return;
    this.compactInFlight = true;
    this.updateControls();
    try {
      await api.compact();
      // Accepted is not done: the outcome comes back as a context.compacted event (done) or a
      // live notice with status "failed" (see compactOutcome), and the toast says which.
      this.compactWatch = true;
      this.toast("Compacting…");
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

  /** What became of "Compact now": a compaction on request landed, or the agent said it failed. */
  compactOutcome(notice, ev) {
    if (!this.compactWatch) return;
    if (ev && ev.kind === "context.compacted" && ev.payload && ev.payload.trigger === "manual") {
      this.compactWatch = false;
      const p = ev.payload;
      const sizes = p.input_tokens_before && p.input_tokens_after ? `: ${formatNumber(p.input_tokens_before)} → ${formatNumber(p.input_tokens_after)} tokens` : "";
      this.toast(`Older messages summarized${sizes}.`);
    } else if (notice && notice.kind === "context.compacted" && notice.status === "failed") {
      this.compactWatch = false;
      this.toast(`Compact failed: ${notice.detail || "the model could not summarize older messages"}. Nothing was changed.`, "warn");
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

  // ---- the shell: the menu, panels as sheets, Escape, where focus goes ---------------

  /**
   * The top bar's actions: a row on a wide screen, a labelled menu on a phone. One panel is
   * open at a time (on a phone each is a full-height sheet); Escape closes what is on top.
   */
  wireShell() {
    const bar = document.querySelector(".topbar");
    const menu = $("menu-btn");
    menu.addEventListener("click", () => this.setMenu(bar.dataset.menu !== "open", true));
    // Choosing an action closes the menu; opening a panel closes the other panels first.
    $("actions").addEventListener(
      "click",
      (e) => {
        const btn = e.target instanceof Element ? e.target.closest("button") : null;
        if (!btn) return;
        const target = btn.getAttribute("aria-controls");
        if (target && btn.getAttribute("aria-expanded") !== "true") this.closeSheets(target);
        this.setMenu(false);
      },
      true,
    );
    document.addEventListener("click", (e) => {
      if (bar.dataset.menu === "open" && e.target instanceof Node && !bar.contains(e.target)) this.setMenu(false);
    });
    // A panel's close button gives focus back to what opened it.
    $("sheets").addEventListener("click", (e) => {
      const btn = e.target instanceof Element ? e.target.closest("button[id$='-close']") : null;
      const section = btn && btn.closest("#sheets > section");
      if (section) queueMicrotask(() => this.focusOpener(this.openerOf(section)));
    });
    document.addEventListener("keydown", (e) => this.onEscape(e));
  }

  setMenu(open, focusFirst = false) {
    const bar = document.querySelector(".topbar");
    const was = bar.dataset.menu === "open";
    bar.dataset.menu = open ? "open" : "closed";
    $("menu-btn").setAttribute("aria-expanded", String(open));
    if (open && focusFirst) {
      // On a wide screen the menu holds only the less-used actions; on a phone, all of them.
      const folded = getComputedStyle($("actions-more")).display === "contents" ? $("actions") : $("actions-more");
      const first = [...folded.querySelectorAll("button")].find((b) => !b.disabled && b.offsetParent !== null);
      if (first) first.focus();
    } else if (!open && was && $("actions").contains(document.activeElement)) {
      // A focused action is about to disappear with the menu: keep focus on the menu.
      queueMicrotask(() => document.activeElement === document.body && $("menu-btn").focus());
    }
  }

  /** The id of the button that opens a panel (its aria-controls). */
  openerOf(section) {
    const btn = document.querySelector(`[aria-controls="${CSS.escape(section.id)}"]:not(#menu-btn)`);
    return btn ? btn.id : "menu-btn";
  }

  /** Focus the button that opened something, or the menu that holds it when it is folded away. */
  focusOpener(id) {
    const btn = $(id);
    if (btn && btn.offsetParent !== null && !btn.disabled) btn.focus();
    else if ($("menu-btn").offsetParent !== null) $("menu-btn").focus();
    else $("input").focus();
  }

  /** Close every open panel but `keep`, through its own close control (it knows its state). */
  closeSheets(keep = null) {
    for (const section of document.querySelectorAll("#sheets > section:not([hidden])")) {
      if (section.id === keep) continue;
      const close = section.querySelector("button[id$='-close']");
      if (close) close.click();
      else section.hidden = true;
    }
    if (keep !== "search-bar" && !$("search-bar").hidden && keep) this.closeSearch();
  }

  /**
   * Escape, once nothing closer handled it: the menu, then the panel that has focus, then a
   * streaming answer (stopped), then any open panel or search.
   */
  onEscape(e) {
    if (e.key !== "Escape" || $("app").hidden) return;
    if (e.defaultPrevented) {
      // A panel closed itself and gave focus to its button, which on a phone is folded in the menu.
      queueMicrotask(() => {
        const a = document.activeElement;
        if (!a || a === document.body || a.offsetParent === null) this.focusOpener("menu-btn");
      });
      return;
    }
    if (document.querySelector("dialog[open]")) return; // the dialog closes itself
    const bar = document.querySelector(".topbar");
    if (bar.dataset.menu === "open") {
      e.preventDefault();
      this.setMenu(false);
      $("menu-btn").focus();
      return;
    }
    const focused = document.activeElement && document.activeElement.closest ? document.activeElement.closest("#sheets > section") : null;
    if (!focused && this.streaming()) {
      e.preventDefault();
      this.stop();
      return;
    }
    const open = focused || [...document.querySelectorAll("#sheets > section:not([hidden])")].pop();
    if (open) {
      e.preventDefault();
      const opener = this.openerOf(open);
      const close = open.querySelector("button[id$='-close']");
      if (close) close.click();
      else open.hidden = true;
      this.focusOpener(opener);
      return;
    }
    if (!$("search-bar").hidden) {
      e.preventDefault();
      this.closeSearch();
      this.focusOpener("search-btn");
    }
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
    input.addEventListener("keydown", (e) => {
      if (e.key === "Escape" && this.editing) {
        e.preventDefault(); // the edit is what Escape undoes here, not a panel or the answer
        this.cancelEdit();
      }
    });
    $("stop-btn").addEventListener("click", () => this.stop());
    $("edit-cancel").addEventListener("click", () => this.cancelEdit());
    for (const b of document.querySelectorAll(".starter")) {
      b.addEventListener("click", () => {
        input.value = b.dataset.prompt;
        this.send();
      });
    }
    // Copy buttons inside rendered code blocks (markdown.js builds them; the click lives here).
    $("timeline").addEventListener("click", (e) => {
      const btn = e.target instanceof Element ? e.target.closest(".code-copy") : null;
      if (!btn) return;
      const code = btn.closest(".md-code")?.querySelector("pre code");
      if (code) this.copy(code.textContent, btn);
    });
    $("search-btn").addEventListener("click", () => ($("search-bar").hidden ? this.openSearch() : this.closeSearch()));
    $("search-close").addEventListener("click", () => {
      this.closeSearch();
      this.focusOpener("search-btn");
    });
    $("search-input").addEventListener("input", () => this.runSearch());
    $("search-input").addEventListener("keydown", (e) => {
      if (e.key === "Enter") {
        e.preventDefault();
        this.stepSearch(e.shiftKey ? 1 : -1);
      } else if (e.key === "Escape") {
        e.preventDefault();
        this.closeSearch();
        this.focusOpener("search-btn");
      }
    });
    $("search-prev").addEventListener("click", () => this.stepSearch(-1));
    $("search-next").addEventListener("click", () => this.stepSearch(1));
    $("search-all").addEventListener("click", () => this.loadAll());
    const exportDialog = $("export-dialog");
    $("export-btn").addEventListener("click", () => exportDialog.showModal());
    exportDialog.addEventListener("close", () => {
      if (exportDialog.returnValue === "md" || exportDialog.returnValue === "json") this.exportTimeline(exportDialog.returnValue);
      exportDialog.returnValue = "";
    });
    const setup = $("setup-dialog");
    $("offline-badge").addEventListener("click", () => setup.showModal());
    document.addEventListener("keydown", (e) => {
      if ((e.ctrlKey || e.metaKey) && e.key === "f" && !$("app").hidden && e.shiftKey) {
        e.preventDefault();
        this.openSearch();
      }
    });
    $("older-btn").addEventListener("click", () => this.loadOlder());
    $("compact-btn").addEventListener("click", () => this.compact());
    $("signout-btn").addEventListener("click", () => this.signOut());
    // Signing out every browser is not undone by a click: it asks first.
    const signOutAll = $("signout-all-dialog");
    $("signout-all-btn").addEventListener("click", () => signOutAll.showModal());
    signOutAll.addEventListener("close", () => {
      if (signOutAll.returnValue === "out") this.signOut(true);
      signOutAll.returnValue = "";
    });
    this.wireShell();
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
    window.addEventListener("online", () => this.conn && this.conn.reconnectNow("online"));
    document.addEventListener("visibilitychange", () => {
      if (document.visibilityState === "visible" && this.conn) this.conn.reconnectNow("focus");
    });
    window.addEventListener("focus", () => this.conn && this.conn.reconnectNow("focus"));
    // Span time ranges ("Tue 14:05–14:30") age: refresh them now and then.
    setInterval(() => this.tl.order.length && this.scheduleRender(), 60000);
  }
}

const app = new App();
window.__delegate = app; // a handle for debugging and browser tests; holds no secrets
registerWorker(); // the offline shell and Web Push; it never caches the API
app.boot();
