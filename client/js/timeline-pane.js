// The timeline on the page: when to draw it, what stays where the person reads, older pages,
// jumping to an event. The blocks come from timeline.buildView; render.js draws them.
//
// Whether the person follows the bottom is kept from scroll events (`pinned`), never measured
// on a delta: reading scrollHeight after a change forces a layout of the whole page (~90,000
// elements with 5,000 events), and a live answer changes it up to 25 times a second. Following
// the bottom is one scroll per frame, in requestAnimationFrame, where the layout is due anyway.

import { HttpError, api } from "./api.js";
import { mergeDelivery } from "./channels.js";
import { updateStream } from "./message-node.js";
import { TimelineView } from "./render.js";
import { mergePage } from "./timeline.js";
import { buildView, drawStart } from "./timeline-view.js";

const $ = (id) => document.getElementById(id);

const STICK_PX = 80; // this close to the bottom counts as at the bottom
const SPOKEN = new Set(["phone", "browser_voice"]);
const JUMP_MARK_MS = 2500; // how long a jumped-to event stays marked
// A reload draws the blocks holding the newest this many items first, then older ones in
// chunks of as many per task: 5,000 events drawn at once kept the page busy for seconds.
const DRAW_CHUNK_ITEMS = 150;
// A render for live events updates the newest this many blocks, and those holding an event a
// fresh one names (a delivery's message, an edited message, a regenerated answer).
const TAIL_BLOCKS = 3;
// Kinds that move the top bar's figures (context.js); other live events leave them as they are.
const FIGURE_KINDS = /^(context|conversation)\./;

/** The keys of the blocks a render for `fresh` live events must update (see TAIL_BLOCKS). */
export function touchedBlocks(blocks, fresh) {
  const only = new Set(blocks.slice(-TAIL_BLOCKS).map((b) => b.key));
  const named = new Set();
  for (const ev of fresh) {
    named.add(ev.id);
    if (ev.parent_id) named.add(ev.parent_id);
    for (const v of Object.values(ev.payload || {})) if (typeof v === "string") named.add(v);
  }
  for (const b of blocks) {
    if (only.has(b.key)) continue;
    const items = b.type === "span" ? b.items : [b];
    const holds = (item) => {
      if (item.event && named.has(item.event.id)) return true;
      return (item.attempts || item.events || []).some((e) => named.has(e.id));
    };
    if (items.some(holds)) only.add(b.key);
  }
  return only;
}

export class TimelinePane {
  /** @param {object} app  the page (App in app.js): its timeline, session, search and controls */
  constructor(app, callbacks) {
    this.app = app;
    this.view = new TimelineView($("timeline"), callbacks);
    this.scroller = $("scroller");
    this.renderQueued = false;
    this.forceBottom = false;
    this.pinned = true; // following the bottom (from scroll events, see above)
    this.followQueued = false;
    this.undrawn = 0; // the oldest blocks not drawn yet (a reload draws the newest first)
    this.drawn = []; // the blocks of the last render
    this.drawTimer = null;
    this.freshLive = [];
    this.fullQueued = false;
    this.shownBlocks = 0; // blocks on screen after the last render
    this.loadingOlder = false;
    this.olderRun = null;
    this.jumpTimer = null;
    // Where our own last scroll to the bottom left the scroller. Its scroll event comes a frame
    // later, maybe after more text has grown the page: from there or lower it is not the person
    // scrolling away. A person scrolling up goes above it.
    this.autoTop = Infinity;
    this.scroller.addEventListener("scroll", () => this.onScroll(), { passive: true });
    $("jump-btn").addEventListener("click", () => {
      this.toBottom();
      $("jump-btn").hidden = true;
      $("input").focus();
    });
    $("older-btn").addEventListener("click", () => this.loadOlder());
  }

  distanceFromBottom() {
    const s = this.scroller;
    return s.scrollHeight - s.scrollTop - s.clientHeight;
  }

  onScroll() {
    if (this.scroller.scrollTop >= this.autoTop - 1) return; // our own, or the page grew since
    this.autoTop = Infinity;
    this.pinned = this.distanceFromBottom() < STICK_PX;
    if (this.pinned) $("jump-btn").hidden = true;
  }

  toBottom() {
    this.scroller.scrollTop = this.scroller.scrollHeight;
    this.autoTop = this.scroller.scrollTop;
    this.pinned = true;
  }

  /** Scroll somewhere that is not the bottom (a kept reading position, a jump). */
  scrollToTop(top) {
    this.autoTop = Infinity;
    this.scroller.scrollTop = top;
  }

  /** Keep the bottom in view after this frame's changes: one scroll per frame, only while pinned. */
  followBottom() {
    if (this.followQueued) return;
    this.followQueued = true;
    requestAnimationFrame(() => {
      this.followQueued = false;
      if (this.pinned) this.toBottom();
    });
  }

  /** Forget the signed-out session's drawing (its older chunks are never drawn). */
  reset() {
    this.view.clear();
    clearTimeout(this.drawTimer);
    this.drawTimer = null;
    this.undrawn = 0;
    this.drawn = [];
    this.shownBlocks = 0;
    this.freshLive = [];
  }

  /** A freshly read history: the newest blocks now, the older ones in chunks after. */
  drawHistory() {
    this.forceBottom = true;
    clearTimeout(this.drawTimer);
    this.undrawn = drawStart(buildView(this.app.tl), DRAW_CHUNK_ITEMS);
    this.renderNow();
    if (this.undrawn) this.drawTimer = setTimeout(() => this.drawOlderChunk(), 0);
  }

  /**
   * A render on the next frame. By default one for live changes (events, a pending bubble's
   * status, a new stream): only the blocks they touch are updated. `full`: every block (the
   * span times that age, say).
   */
  scheduleRender(full = false) {
    if (full) this.fullQueued = true;
    if (this.renderQueued) return;
    this.renderQueued = true;
    const run = () => {
      if (!this.renderQueued) return;
      this.renderNow({ live: true });
    };
    requestAnimationFrame(run);
    setTimeout(run, 100); // rAF pauses in background tabs; the timeline must not
  }

  /**
   * Live events committed on /chat. The common case, an event the page has not shown yet
   * landing after everything drawn, is appended by the next render; it is the render's job to
   * find which blocks changed (render.js reconciles by key and leaves the others alone).
   */
  eventsArrived(fresh) {
    this.freshLive.push(...fresh);
    this.scheduleRender();
  }

  /**
   * The common delta: more text for an answer already streaming on the page. Only its bubble
   * changes, so only it is updated, at once, instead of rebuilding the whole view (which costs
   * in proportion to the loaded history), even with a render queued: the delta need not wait for
   * it, and the render finds the bubble already current. False when a full render is needed.
   */
  paintDelta(turnId) {
    const s = this.app.tl.streams.get(turnId);
    const node = s && document.querySelector(`#timeline article.streaming[data-turn-id="${CSS.escape(turnId)}"]`);
    if (!node || node._attempt !== s.attempt) return false;
    updateStream(node, { type: "stream", stream: s });
    if (this.pinned) this.followBottom();
    return true;
  }

  /** Draw now. `live`: for live changes only (see scheduleRender); otherwise every block. */
  renderNow({ live = false } = {}) {
    const full = !live || this.fullQueued;
    this.renderQueued = false;
    this.fullQueued = false;
    const app = this.app;
    const fresh = this.freshLive;
    this.freshLive = [];
    const blocks = buildView(app.tl);
    this.markLast(blocks);
    if (app.find.query) this.undrawn = 0; // search marks matches among the drawn nodes
    const only = full ? null : touchedBlocks(blocks, fresh);
    this.view.render(this.undrawn ? blocks.slice(Math.min(this.undrawn, blocks.length)) : blocks, only);
    this.drawn = blocks;
    // The figures scan the whole history: only what can move them does.
    if (full || fresh.some((ev) => FIGURE_KINDS.test(ev.kind) || ev.conversation_id !== app.status.conversationId)) {
      app.status.applyState(null);
    } else {
      app.status.updateControls();
    }
    if (app.find.query) app.find.run(false);
    // What is shown, not what is held: hidden bookkeeping alone (the agent's session start on a
    // fresh system) is still "nothing here yet". Pending bubbles and streams are blocks too.
    this.shownBlocks = blocks.length;
    $("empty").hidden = blocks.length > 0;
    this.updateOlder();
    if (this.forceBottom) {
      this.toBottom();
      $("jump-btn").hidden = true;
    } else if (this.pinned) {
      this.followBottom();
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
    const scroller = this.scroller;
    const height = scroller.scrollHeight;
    const top = scroller.scrollTop;
    const atBottom = height - top - scroller.clientHeight < STICK_PX;
    change();
    // The scroller does no scroll anchoring of its own (overflow-anchor: none): both cases are ours.
    if (atBottom) this.toBottom();
    else this.scrollToTop(top + (scroller.scrollHeight - height));
  }

  /**
   * Scroll the timeline (and only it) so `node` is in its middle. scrollIntoView would scroll
   * every ancestor too, the page's own overflow-hidden shell included, moving the top bar and
   * the composer off screen on a phone.
   */
  centerInTimeline(node) {
    const box = this.scroller.getBoundingClientRect();
    const r = node.getBoundingClientRect();
    this.scrollToTop(this.scroller.scrollTop + r.top - box.top - (box.height - r.height) / 2);
  }

  /** Open whatever folds `node` away (its span, its activity line) and put it in the middle. */
  reveal(node) {
    for (let p = node.parentElement; p; p = p.parentElement) if (p.tagName === "DETAILS") p.open = true;
    this.centerInTimeline(node);
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
    const idle = !this.app.streaming() && this.app.tl.pending.size === 0;
    if (lastAnswer && lastMsg === lastAnswer && idle && lastAnswer.event.parent_id) lastAnswer.canRegenerate = true;
    if (lastUser && idle && (lastMsg === lastUser || (lastAnswer && lastAnswer.event.parent_id === lastUser.event.id) || (lastMsg && lastMsg.event && lastMsg.event.parent_id === lastUser.event.id))) {
      lastUser.canEdit = true;
    }
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
    const tl = this.app.tl;
    older.hidden = !tl.hasOlder;
    older.disabled = this.loadingOlder;
    older.textContent = this.loadingOlder ? "Loading…" : "Load older activity";
    $("older-end").hidden = tl.hasOlder || !this.shownBlocks;
  }

  /** One older page; a call while one loads waits for that one. */
  loadOlder() {
    if (!this.olderRun) this.olderRun = this.fetchOlder().finally(() => (this.olderRun = null));
    return this.olderRun;
  }

  async fetchOlder() {
    const app = this.app;
    if (this.loadingOlder || !app.tl.hasOlder) return;
    const session = app.session;
    this.loadingOlder = true;
    this.updateOlder();
    try {
      const page = await api.timeline(app.tl.cursor);
      if (session !== app.session) return;
      this.drawAll();
      // Keep what the person is reading exactly where it is: grow the scroll offset by
      // whatever was inserted above it.
      const height = this.scroller.scrollHeight;
      const top = this.scroller.scrollTop;
      mergePage(app.tl, page, { older: true });
      this.renderNow();
      this.scrollToTop(top + (this.scroller.scrollHeight - height));
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return app.showSignIn();
      app.toast("Could not load older activity.", "warn");
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
    const app = this.app;
    const session = app.session;
    while (!app.tl.byId.has(id) && app.tl.hasOlder) {
      const before = app.tl.cursor;
      await this.loadOlder();
      if (session !== app.session) return false;
      if (app.tl.cursor === before) return false; // an error: loadOlder told the person
    }
    if (this.renderQueued) this.renderNow();
    this.drawAll();
    const node = app.tl.byId.has(id) ? document.querySelector(`#timeline [data-event-id="${CSS.escape(id)}"]`) : null;
    if (!node) return false; // the caller says so where the person looks
    this.reveal(node);
    for (const n of document.querySelectorAll("#timeline .jump-target")) n.classList.remove("jump-target");
    node.classList.add("jump-target");
    clearTimeout(this.jumpTimer);
    this.jumpTimer = setTimeout(() => node.classList.remove("jump-target"), JUMP_MARK_MS);
    $("announcer").textContent = "Shown on the timeline.";
    return true;
  }
}
