// A browser voice call: the microphone, the `/browser-call` socket and the speaker, as a
// small state machine (idle → starting → connecting → live → ending → ended), plus the pure
// words the page shows around it (the "call live" indicator, durations, refusals).
//
// The socket (gateway, see voice design): binary frames are PCM16 LE mono 24 kHz both ways;
// text frames are JSON — server → page: state, mark, clear, transcript, error;
// page → server: mark (the audio before it has played, or was cleared), hangup.
// Everything with a side effect comes in through the constructor, so Node tests drive it.

import { Pcm16Decoder, SAMPLE_RATE } from "./voice-audio.js";

export const CLOSE_NORMAL = 1000;
export const CLOSE_TRY_LATER = 1013;
export const CLOSE_BAD_PRESET = 4400;
export const CLOSE_UNAUTHORIZED = 4401;
export const CLOSE_BUSY = 4409;
export const CLOSE_BUDGET = 4402; // BUDGET_HARD_STOP_OWNER: a spend line is reached

export const MIC_CONSTRAINTS = Object.freeze({
  audio: Object.freeze({ echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 }),
});

export const MESSAGES = Object.freeze({
  mic_denied: "Microphone access was denied — allow it in the browser's site settings to talk to Delegate",
  no_mic: "No microphone was found — connect one to talk to Delegate",
  mic_failed: "The microphone could not be started (another app may be using it)",
  insecure: "The microphone needs a secure page: open Delegate over https (or on localhost)",
  audio_failed: "Audio could not start in this browser",
  busy: "The line is busy: another call is live.",
  budget: "Your spending limit is reached: calls wait until it resets or you raise it.",
  unauthorized: "Your session ended. Sign in again.",
  bad_preset: "That voice preset is not available",
  unavailable: "Voice is not available right now. Try again in a moment.",
  dropped: "The call dropped",
});

/** Socket buffer above which mic frames are dropped: late audio is worse than lost audio. */
export const MAX_BUFFERED_BYTES = 48000; // 1 s of PCM16 at 24 kHz
/** How long Hang up waits for the server's "ended" before closing the socket itself. */
export const HANGUP_GRACE_MS = 1500;
/** Muted, no audio goes out: a heartbeat this often tells the server the page is still there
 * (a call that sends neither is ended as lost after the server's VOICE_MEDIA_TIMEOUT_S, 10 s). */
export const MUTED_HEARTBEAT_MS = 2000;

/** ws(s)://host/browser-call, with `?preset=` when one was picked. */
export function callUrl(loc, preset = "") {
  const scheme = loc.protocol === "https:" ? "wss" : "ws";
  const query = preset ? `?preset=${encodeURIComponent(preset)}` : "";
  return `${scheme}://${loc.host}/browser-call${query}`;
}

/** "02:13", or "1:02:13" past an hour; never negative (clocks differ between machines). */
export function formatDuration(ms) {
  const total = Math.max(0, Math.floor((Number.isFinite(ms) ? ms : 0) / 1000));
  const s = String(total % 60).padStart(2, "0");
  const m = Math.floor(total / 60) % 60;
  const hours = Math.floor(total / 3600);
  return hours ? `${hours}:${String(m).padStart(2, "0")}:${s}` : `${String(m).padStart(2, "0")}:${s}`;
}

/** What getUserMedia's refusal means for the person, as a MESSAGES key. */
export function micError(err) {
  const name = err && err.name;
  if (name === "NotAllowedError" || name === "SecurityError" || name === "PermissionDeniedError") return "mic_denied";
  if (name === "NotFoundError" || name === "OverconstrainedError" || name === "DevicesNotFoundError") return "no_mic";
  return "mic_failed";
}

/**
 * The indicator every tab shows for the system's one call (`VoiceState` from `/chat`):
 * {show, text, busy, reason}. `busy` when the live session is not this tab's own call.
 */
export function voiceIndicator(state, now, ownSessionId = null) {
  if (!state || !state.active) return { show: false, text: "", busy: false, reason: "", kind: null };
  const what = state.kind === "phone" ? "Phone call" : "Voice call";
  const since = Date.parse(state.started_at || "");
  let text = `${what} live${Number.isFinite(since) ? ` · ${formatDuration(now - since)}` : ""}`;
  if (state.status === "connecting") text = `${what} connecting…`;
  else if (state.status === "ending") text = `${what} ending…`;
  const mine = !!ownSessionId && state.session_id === ownSessionId;
  return { show: true, text, busy: !mine, reason: mine ? "" : MESSAGES.busy, kind: state.kind || null };
}

/**
 * One call. `start()` must be called from the click itself: the audio engine (an
 * AudioContext) is created before the first await, while the click still counts as a gesture.
 *
 * @param {object} o
 * @param {string} o.url                         the /browser-call URL
 * @param {(c: object) => Promise<MediaStream>} o.getUserMedia
 * @param {() => object} o.createAudio           {start(stream, {onFrame, onMarks}), play, mark, clear, close}
 * @param {typeof WebSocket} o.WebSocket
 * @param {(info: object) => void} [o.onChange]  after every change of `info`
 * @param {(frame: object) => void} [o.onTranscript]
 */
export class VoiceCall {
  constructor(o) {
    this.url = o.url;
    this.getUserMedia = o.getUserMedia;
    this.createAudio = o.createAudio;
    this.WebSocket = o.WebSocket;
    this.now = o.now || (() => Date.now());
    this.timers = o.timers || { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (t) => clearTimeout(t) };
    this.onChange = o.onChange || (() => {});
    this.onTranscript = o.onTranscript || (() => {});
    this.maxBuffered = o.maxBuffered ?? MAX_BUFFERED_BYTES;
    this.hangupGraceMs = o.hangupGraceMs ?? HANGUP_GRACE_MS;
    this.info = { status: "idle", muted: false, sessionId: null, liveAt: null, endedAt: null, reason: null, error: null, message: "" };
    this.stats = { framesSent: 0, framesDropped: 0, framesHeld: 0, audioReceived: 0, marksEchoed: 0 };
    this.audio = null;
    this.stream = null;
    this.ws = null;
    this.lastError = null; // the server's error frame, for the close that follows it
    this.graceTimer = null;
    this.lastHeartbeat = null; // when a muted call last sent one
  }

  get status() {
    return this.info.status;
  }

  _set(patch) {
    Object.assign(this.info, patch);
    this.onChange({ ...this.info });
  }

  async start() {
    if (this.info.status !== "idle") return;
    this._set({ status: "starting" });
    try {
      this.audio = this.createAudio();
    } catch {
      return this._finish({ error: "audio_failed" });
    }
    if (!this.getUserMedia) return this._finish({ error: "insecure" });
    let stream;
    try {
      stream = await this.getUserMedia(MIC_CONSTRAINTS);
    } catch (err) {
      return this._finish({ error: micError(err) });
    }
    this.stream = stream;
    if (this.info.status !== "starting") return this._release(); // hung up while asking
    try {
      await this.audio.start(stream, { onFrame: (f) => this._micFrame(f), onMarks: (names) => this._echo(names) });
    } catch {
      return this._finish({ error: "audio_failed" });
    }
    if (this.info.status !== "starting") return this._release();
    this._open();
  }

  _open() {
    const ws = new this.WebSocket(this.url);
    ws.binaryType = "arraybuffer";
    this.ws = ws;
    ws.onmessage = (msg) => this._onMessage(msg.data);
    ws.onclose = (e) => this._onClose(e || {});
    ws.onerror = () => {}; // the close that follows says what happened
    this._set({ status: "connecting" });
  }

  _onMessage(data) {
    if (typeof data !== "string") {
      this.stats.audioReceived += 1;
      if (this.audio && this.info.status !== "ended") this.audio.play(data);
      return;
    }
    let frame;
    try {
      frame = JSON.parse(data);
    } catch {
      return;
    }
    switch (frame && frame.type) {
      case "state":
        if (frame.session_id) this.info.sessionId = frame.session_id;
        if (frame.status === "live" && this.info.status === "connecting") this._set({ status: "live", liveAt: this.now() });
        else if (frame.status === "ended") this._finish({ reason: frame.reason || "ended", message: frame.message || "" });
        else this._set({});
        break;
      case "mark":
        if (this.audio && typeof frame.name === "string") this.audio.mark(frame.name);
        break;
      case "clear":
        if (this.audio) this.audio.clear();
        break;
      case "transcript":
        this.onTranscript(frame);
        break;
      case "error":
        this.lastError = { code: frame.code, message: frame.message || "" };
        if (frame.code === "busy") this._finish({ error: "busy" });
        break;
      default:
        break;
    }
  }

  _onClose(e) {
    this.ws = null;
    if (this.info.status === "ended") return;
    const code = e.code;
    if (code === CLOSE_BUSY) return this._finish({ error: "busy" });
    if (code === CLOSE_BUDGET) return this._finish({ error: "budget", message: (this.lastError && this.lastError.message) || "" });
    if (code === CLOSE_UNAUTHORIZED) return this._finish({ error: "unauthorized" });
    if (code === CLOSE_BAD_PRESET) return this._finish({ error: "bad_preset", message: (this.lastError && this.lastError.message) || "" });
    if (this.info.status === "ending") return this._finish({ reason: "hangup" });
    if (code === CLOSE_TRY_LATER || this.info.status === "connecting") {
      return this._finish({ error: "unavailable", message: (this.lastError && this.lastError.message) || "" });
    }
    return this._finish({ error: "dropped" });
  }

  _micFrame(frame) {
    const ws = this.ws;
    if (this.info.status !== "live" || !ws || ws.readyState !== 1) return;
    if (this.info.muted) {
      this.stats.framesHeld += 1;
      const now = this.now();
      const due = this.lastHeartbeat === null || now - this.lastHeartbeat >= MUTED_HEARTBEAT_MS;
      if (due && this._sendJson({ type: "heartbeat" })) this.lastHeartbeat = now;
      return;
    }
    if (ws.bufferedAmount > this.maxBuffered) {
      this.stats.framesDropped += 1;
      return;
    }
    ws.send(frame);
    this.stats.framesSent += 1;
  }

  _echo(names) {
    for (const name of names) if (this._sendJson({ type: "mark", name })) this.stats.marksEchoed += 1;
  }

  _sendJson(frame) {
    const ws = this.ws;
    if (!ws || ws.readyState !== 1) return false;
    ws.send(JSON.stringify(frame));
    return true;
  }

  /** Mute: nothing is sent (the track is disabled too, so the browser's mic light agrees). */
  setMuted(muted) {
    if (this.info.status === "ended" || this.info.status === "idle") return;
    if (this.stream) for (const t of this.stream.getAudioTracks()) t.enabled = !muted;
    this._set({ muted: !!muted });
  }

  toggleMute() {
    this.setMuted(!this.info.muted);
  }

  /** Hang up: tell the server, stop the audio at once, close when it confirms (or soon anyway). */
  hangup() {
    const st = this.info.status;
    if (st === "ended" || st === "idle" || st === "ending") return;
    if (st === "starting") return this._finish({ reason: "hangup" });
    this._sendJson({ type: "hangup" });
    this._release({ keepSocket: true });
    this._set({ status: "ending" });
    this.graceTimer = this.timers.setTimeout(() => this._finish({ reason: "hangup" }), this.hangupGraceMs);
  }

  _release({ keepSocket = false } = {}) {
    if (this.stream) for (const t of this.stream.getTracks()) t.stop();
    this.stream = null;
    if (this.audio) {
      try {
        this.audio.close();
      } catch {
        /* already closed */
      }
    }
    this.audio = null;
    if (!keepSocket && this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onmessage = ws.onclose = null;
      try {
        ws.close(CLOSE_NORMAL, "bye");
      } catch {
        /* already closed */
      }
    }
  }

  _finish({ reason = null, error = null, message = "" }) {
    if (this.info.status === "ended") return;
    if (this.graceTimer) this.timers.clearTimeout(this.graceTimer);
    this.graceTimer = null;
    this._release();
    const text = error ? MESSAGES[error] || MESSAGES.dropped : message;
    const detail = error && message && message !== text ? message : "";
    this._set({ status: "ended", endedAt: this.now(), reason: reason || error, error, message: text, detail });
  }
}

/** The Web Audio side: one 24 kHz context, the mic worklet into the socket, the player worklet out. */
export class BrowserAudio {
  constructor({ AudioContextClass = globalThis.AudioContext || globalThis.webkitAudioContext, base = import.meta.url } = {}) {
    this.base = base;
    this.ctx = new AudioContextClass({ sampleRate: SAMPLE_RATE, latencyHint: "interactive" });
    this.decoder = new Pcm16Decoder();
    this.nodes = [];
    this.player = null;
    this.mic = null;
  }

  async start(stream, { onFrame, onMarks }) {
    const ctx = this.ctx;
    if (ctx.state === "suspended") await ctx.resume();
    await ctx.audioWorklet.addModule(new URL("./mic-worklet.js", this.base).href);
    await ctx.audioWorklet.addModule(new URL("./player-worklet.js", this.base).href);
    const source = ctx.createMediaStreamSource(stream);
    const mic = new AudioWorkletNode(ctx, "delegate-mic", { numberOfInputs: 1, numberOfOutputs: 1, outputChannelCount: [1] });
    mic.port.onmessage = (e) => onFrame(e.data);
    const player = new AudioWorkletNode(ctx, "delegate-player", { numberOfInputs: 0, numberOfOutputs: 1, outputChannelCount: [1] });
    player.port.onmessage = (e) => e.data && e.data.type === "marks" && onMarks(e.data.names || [], !!e.data.cleared);
    source.connect(mic);
    // The mic node writes silence: connected only so the graph keeps pulling it.
    mic.connect(ctx.destination);
    player.connect(ctx.destination);
    this.nodes = [source, mic, player];
    this.mic = mic;
    this.player = player;
  }

  play(buffer) {
    if (!this.player) return;
    const samples = this.decoder.decode(buffer);
    if (samples.length) this.player.port.postMessage({ type: "audio", samples }, [samples.buffer]);
  }

  mark(name) {
    if (this.player) this.player.port.postMessage({ type: "mark", name });
  }

  clear() {
    if (this.player) this.player.port.postMessage({ type: "clear" });
  }

  close() {
    for (const node of [this.mic, this.player]) if (node) node.port.postMessage({ type: "stop" });
    for (const node of this.nodes) {
      try {
        node.disconnect();
      } catch {
        /* not connected */
      }
    }
    this.nodes = [];
    this.mic = this.player = null;
    if (this.ctx.state !== "closed") this.ctx.close().catch(() => {});
  }
}
