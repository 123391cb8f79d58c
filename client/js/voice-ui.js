// The Voice button, the call panel, live captions and the "call live" indicator: the DOM
// around a VoiceCall (voice.js). The system has one call at a time; every tab learns about
// it from the `voice` state on /chat and disables its button while another call is live.

import { h, icon, reconcile, setText } from "./dom.js";
import { channelInfo } from "./format.js";
import { Captions } from "./voice-captions.js";
import { BrowserAudio, VoiceCall, callUrl, formatDuration, voiceIndicator } from "./voice.js";

const $ = (id) => document.getElementById(id);

const ENDED_SHOWN_MS = 6000; // "Call ended · 01:23" fades after this
const ERROR_SHOWN_MS = 20000; // a refusal (mic denied, busy) stays long enough to read and act on
const CAPTIONS_KEPT_MS = 30000; // captions the ledger never confirmed go this long after the call
const STICK_PX = 80;

const STATUS_TEXT = {
  starting: "Asking for the microphone…",
  connecting: "Connecting…",
  live: "Live",
  ending: "Hanging up…",
};

export class VoiceUI {
  constructor() {
    this.call = null;
    this.state = null; // the system's VoiceState, from /chat or /api/state
    this.captions = new Captions();
    this.captionNodes = new Map();
    this.ticker = null;
    this.hideTimer = null;
    this.captionTimer = null;
    this.wire();
    this.render();
  }

  wire() {
    $("voice-btn").addEventListener("click", () => this.start());
    $("call-mute").addEventListener("click", () => this.call && this.call.toggleMute());
    $("call-hangup").addEventListener("click", () => this.hangup());
    $("call-dismiss").addEventListener("click", () => this.dismiss());
    window.addEventListener("pagehide", () => this.hangup());
  }

  /** This tab's call is under way (not idle, not over). */
  get inCall() {
    return !!this.call && this.call.status !== "ended";
  }

  // ---- the system's call state ------------------------------------------------------

  setVoiceState(state) {
    this.state = state && typeof state === "object" ? state : null;
    this.updatePresets();
    this.render();
  }

  updatePresets() {
    const select = $("voice-preset");
    const s = this.state || {};
    const presets = Array.isArray(s.presets) ? s.presets.filter((p) => typeof p === "string") : [];
    const sig = JSON.stringify([presets, s.default_preset || null]);
    if (select.dataset.sig !== sig) {
      select.dataset.sig = sig;
      const chosen = select.value;
      const label = s.default_preset ? `Default voice (${s.default_preset})` : "Default voice";
      select.replaceChildren(h("option", { value: "", text: label }), ...presets.map((p) => h("option", { value: p, text: p })));
      select.value = presets.includes(chosen) ? chosen : "";
    }
    // A choice only when there is one to make.
    select.hidden = presets.length < 2;
  }

  // ---- the call ---------------------------------------------------------------------

  start() {
    if (this.inCall) return;
    const button = $("voice-btn");
    if (button.disabled) return;
    // Focus may be dropped to the page before the next render (the button hides): it follows.
    this.focusFollows = document.activeElement === button;
    clearTimeout(this.hideTimer);
    clearTimeout(this.captionTimer);
    if (this.captions.clear()) this.renderCaptions();
    const preset = $("voice-preset").hidden ? "" : $("voice-preset").value;
    const media = navigator.mediaDevices;
    this.call = new VoiceCall({
      url: callUrl(location, preset),
      getUserMedia: media && media.getUserMedia ? (c) => media.getUserMedia(c) : null,
      createAudio: () => new BrowserAudio(),
      WebSocket: globalThis.WebSocket,
      onChange: (info) => this.onCallChange(info),
      onTranscript: (frame) => {
        if (this.captions.add(frame)) this.renderCaptions();
      },
    });
    this.call.start(); // synchronously up to its first await: the AudioContext is made in the click
  }

  hangup() {
    if (document.activeElement === $("call-hangup")) this.focusFollows = true;
    if (this.call) this.call.hangup();
  }

  /** Signing out ends the call and forgets what it showed. */
  stop() {
    this.hangup();
    this.dismiss();
    if (this.captions.clear()) this.renderCaptions();
  }

  dismiss() {
    if (document.activeElement === $("call-dismiss")) this.focusFollows = true;
    clearTimeout(this.hideTimer);
    if (this.call && !this.inCall) this.call = null;
    this.render();
  }

  onCallChange(info) {
    if (info.status === "ended") {
      clearTimeout(this.hideTimer);
      this.hideTimer = setTimeout(() => this.dismiss(), info.error ? ERROR_SHOWN_MS : ENDED_SHOWN_MS);
      clearTimeout(this.captionTimer);
      this.captionTimer = setTimeout(() => this.captions.clear() && this.renderCaptions(), CAPTIONS_KEPT_MS);
      const say = info.error ? info.message : "Call ended";
      $("announcer").textContent = say;
    }
    this.render();
  }

  /** A committed event arrived: the caption it confirms goes. */
  committed(ev) {
    if (this.captions.committed(ev)) this.renderCaptions();
  }

  // ---- rendering ----------------------------------------------------------------------

  render() {
    const now = Date.now();
    const info = this.call ? this.call.info : null;
    const own = info ? info.sessionId : null;
    const ind = voiceIndicator(this.state, now, own);

    const chip = $("voice-live");
    chip.hidden = !ind.show;
    setText(chip, ind.text);
    chip.dataset.kind = ind.kind || "";

    const button = $("voice-btn");
    button.hidden = this.inCall;
    const busy = ind.busy && !this.inCall;
    button.disabled = busy;
    const reason = busy ? ind.reason : "Talk to Delegate: a voice call in this browser";
    button.title = reason;
    setText($("voice-reason"), busy ? ind.reason : "");

    this.renderPanel(info, now);
    this.keepFocus();
    const ticking = ind.show || (info && info.status === "live");
    if (ticking && !this.ticker) this.ticker = setInterval(() => this.render(), 1000);
    else if (!ticking && this.ticker) {
      clearInterval(this.ticker);
      this.ticker = null;
    }
  }

  /**
   * The control that had focus may just have gone (Voice hides when the call starts, Hang up
   * when it ends, Close with the panel): focus moves to the control that replaces it.
   */
  keepFocus() {
    const active = document.activeElement;
    const lost = !active || active === document.body || active.offsetParent === null;
    const ours = this.focusFollows || (active && (active.id === "voice-btn" || (active.closest && active.closest("#call-panel"))));
    if (!lost || !ours) return;
    this.focusFollows = false;
    const next = [$("call-hangup"), $("voice-btn"), $("call-dismiss"), $("input")].find((b) => !b.hidden && !b.disabled && b.offsetParent !== null);
    if (next) next.focus();
  }

  renderPanel(info, now) {
    const panel = $("call-panel");
    panel.hidden = !info;
    if (!info) {
      panel.dataset.status = "";
      return;
    }
    panel.dataset.status = info.status;
    panel.dataset.error = info.error || "";
    const status = $("call-status");
    const timer = $("call-timer");
    const mute = $("call-mute");
    const ended = info.status === "ended";
    if (ended) {
      const took = info.liveAt ? ` · ${formatDuration(info.endedAt - info.liveAt)}` : "";
      setText(status, info.error ? info.message : `Call ended${took}`);
      status.setAttribute("role", info.error ? "alert" : "status");
    } else {
      setText(status, STATUS_TEXT[info.status] || info.status);
      status.setAttribute("role", "status");
    }
    const detail = $("call-detail");
    const more = ended ? info.detail || (!info.error && info.message && info.message !== "the call ended" ? info.message : "") : "";
    setText(detail, more);
    detail.hidden = !more;
    timer.hidden = info.status !== "live";
    setText(timer, info.liveAt ? formatDuration(now - this.liveSince(info)) : "00:00");
    mute.hidden = !(info.status === "live" || info.status === "connecting");
    mute.setAttribute("aria-pressed", String(!!info.muted));
    setText(mute.querySelector(".btn-label"), info.muted ? "Unmute" : "Mute");
    mute.title = info.muted ? "Muted: Delegate hears nothing. Click to talk again" : "Mute the microphone";
    $("call-hangup").hidden = ended;
    $("call-dismiss").hidden = !ended;
  }

  /** When this call went live: the system's clock when it reports this call (so every tab agrees). */
  liveSince(info) {
    const s = this.state;
    const since = s && s.session_id && s.session_id === info.sessionId ? Date.parse(s.started_at || "") : NaN;
    return Number.isFinite(since) ? since : info.liveAt;
  }

  renderCaptions() {
    const scroller = $("scroller");
    const atBottom = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < STICK_PX;
    const list = $("voice-captions");
    const shown = this.captions.visible();
    reconcile(list, this.captionNodes, shown, (c) => captionNode(c), (node, c) => updateCaption(node, c));
    list.hidden = shown.length === 0;
    if (atBottom) scroller.scrollTop = scroller.scrollHeight;
  }
}

function captionNode(c) {
  const info = channelInfo("browser_voice");
  const text = h("p", {});
  const node = h(
    "article",
    { class: `msg ${c.role === "user" ? "msg-user" : "msg-assistant"} caption`, "data-caption": c.key, "data-role": c.role },
    h(
      "div",
      { class: "msg-meta" },
      h("span", { class: "who", text: c.role === "user" ? "You" : "Delegate" }),
      h("span", { class: "channel channel-mic", title: `Channel: ${info.label}` }, icon(info.icon), info.label),
      h("span", { class: "caption-mark" }),
    ),
    h("div", { class: "bubble md" }, text),
  );
  node._text = text;
  updateCaption(node, c);
  return node;
}

function updateCaption(node, c) {
  setText(node._text, c.text);
  node.dataset.final = String(c.final);
  setText(node.querySelector(".caption-mark"), c.final ? "saving…" : "live caption");
  node.setAttribute("aria-label", `${c.role === "user" ? "You" : "Delegate"}, live caption: ${c.text}`);
}
