// The top bar's state: the "Context used" meter and its chips, the Offline badge, the
// capsule notice, and the actions that depend on what Delegate is doing (Compact now, End
// conversation, Stop), with what became of a Compact now.

import { HttpError, api } from "./api.js";
import { contextFigures } from "./context.js";
import { formatNumber, formatPercent, formatTime, fullTime } from "./format.js";

const $ = (id) => document.getElementById(id);

export class StatusBar {
  /** @param {object} app  the page (App in app.js): its state, timeline, socket and toasts */
  constructor(app) {
    this.app = app;
    this.compactInFlight = false;
    this.compactWatch = false; // a Compact now was accepted: its outcome gets a toast
    this.noticeTimer = null;
    this.conversationId = null; // the figures' conversation: a live event of another moves them
    $("compact-btn").addEventListener("click", () => this.compact());
  }

  applyState(state) {
    const app = this.app;
    if (state && typeof state === "object") {
      app.state = state;
      // The system's call, when the gateway reports it: every tab shows it.
      if ("voice" in state && app.voice) app.voice.setVoiceState(state.voice);
    }
    const s = app.state;
    // One source for the meter, the chips and the rows: the timeline's own events, with the
    // state's figures where the loaded timeline has none.
    const f = contextFigures(app.tl.order, s);
    this.conversationId = f.conversationId;
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
    const app = this.app;
    const s = app.state;
    const btn = $("compact-btn");
    const working = !!(s && (s.busy || s.compacting));
    btn.disabled = !s || working || this.compactInFlight;
    $("compact-label").textContent = this.compactInFlight || (s && s.compacting) ? "Compacting…" : "Compact now";
    btn.title = working ? "Disabled while a response or compaction is running" : "Summarize older messages now, so the conversation takes less context";
    btn.setAttribute("aria-busy", String(this.compactInFlight || !!(s && s.compacting)));
    // Actions that need the bus wait while it is away.
    const away = !app.conn || app.conn.status !== "live";
    if (away) {
      btn.disabled = true;
      btn.title = "Paused while reconnecting";
    }
    $("end-btn").disabled = away;
    const turn = app.streaming();
    const stop = $("stop-btn");
    // The Stop button goes away with the answer: focus on it moves to the composer, not the page.
    if (!turn && !stop.hidden && document.activeElement === stop) queueMicrotask(() => $("input").focus());
    stop.hidden = !turn;
    stop.disabled = away || app.composer.controlInFlight === "stop";
    stop.dataset.turnId = turn || "";
    for (const b of document.querySelectorAll("#timeline .act-regenerate, #timeline .act-edit")) b.disabled = away || !!turn;
  }

  async compact() {
    if (this.compactInFlight) return;
    this.compactInFlight = true;
    this.updateControls();
    // Accepted is not done: the outcome comes back as a context.compacted event (done) or a
    // live notice with status "failed" (see compactOutcome), and the toast says which. Watched
    // from before the request: a quick failure's notice can reach this tab before the answer.
    this.compactWatch = true;
    try {
      await api.compact();
      if (this.compactWatch) this.app.toast("Compacting…"); // unless its outcome came first
    } catch (err) {
      this.compactWatch = false;
      if (err instanceof HttpError && err.status === 409) this.app.toast("Busy: a response or compaction is running.", "warn");
      else if (err instanceof HttpError && err.status === 401) return this.app.showSignIn();
      else this.app.toast("Compaction could not start.", "warn");
    } finally {
      this.compactInFlight = false;
      this.updateControls();
    }
  }

  async endConversation() {
    try {
      await api.endConversation();
      this.app.toast("Conversation ended. Your timeline stays.");
    } catch (err) {
      if (err instanceof HttpError && err.status === 401) return this.app.showSignIn();
      this.app.toast(err instanceof HttpError && err.status === 409 ? "Busy: try again when Delegate is idle." : "Could not end the conversation.", "warn");
    }
  }

  /** What became of "Compact now": a compaction on request landed, or the agent said it failed. */
  compactOutcome(notice, ev) {
    if (!this.compactWatch) return;
    if (ev && ev.kind === "context.compacted" && ev.payload && ev.payload.trigger === "manual") {
      this.compactWatch = false;
      const p = ev.payload;
      const sizes = p.input_tokens_before && p.input_tokens_after ? `: ${formatNumber(p.input_tokens_before)} → ${formatNumber(p.input_tokens_after)} tokens` : "";
      this.app.toast(`Older messages summarized${sizes}.`);
    } else if (notice && notice.kind === "context.compacted" && notice.status === "failed") {
      this.compactWatch = false;
      this.app.toast(`Compact failed: ${notice.detail || "the model could not summarize older messages"}. Nothing was changed.`, "warn");
    }
  }

  showNotice(ev) {
    if (ev.kind !== "context.capsule") return;
    const el = $("live-notice");
    clearTimeout(this.noticeTimer);
    if (ev.status === "started") {
      el.textContent = "Updating what I keep in mind…";
      el.dataset.tone = "";
      this.noticeTimer = setTimeout(() => this.clearNotice(), 60000);
    } else if (ev.status === "failed") {
      el.textContent = "Could not update what I keep in mind";
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
}
