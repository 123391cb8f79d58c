// The /chat WebSocket: hello → replay → ready → live, and reconnection with backoff.
//
// Status values: "connecting" (first attempt), "live" (replay done), "reconnecting"
// (dropped; a retry is scheduled or running), "signed-out" (4401: the session is gone),
// "stopped" (we closed it on purpose).

export const CLOSE_UNAUTHORIZED = 4401;
export const CLOSE_RESYNC = 4408;
/** The longest wait between two socket attempts. */
export const BACKOFF_CAP_MS = 5000;
/**
 * While away, readiness (`GET /readyz`: no token, a few bytes) is polled, first after
 * READY_POLL_MS, then doubling up to READY_POLL_CAP_MS; a ready server means a socket attempt
 * at once. With a probe there are no blind socket retries: every attempt follows an answer.
 */
export const READY_POLL_MS = 250;
export const READY_POLL_CAP_MS = 1000;

/**
 * Exponential backoff with jitter: attempt 0 → ~base, doubling up to `max`.
 * Half the delay is fixed and half random, so many tabs do not retry in lockstep.
 */
export function backoffDelay(attempt, { base = 500, max = BACKOFF_CAP_MS, random = Math.random } = {}) {
  const ceiling = Math.min(max, base * 2 ** Math.max(0, attempt));
  return Math.round(ceiling / 2 + random() * (ceiling / 2));
}

/**
 * Ready for the timeline: the gateway answers and NATS and the ledger are there (the agent may
 * still be starting: the timeline works without it). The page's `probeReady`.
 */
export async function timelineReady() {
  try {
    const res = await fetch("/readyz", { cache: "no-store", credentials: "omit" });
    if (res.ok) return true;
    const body = await res.json().catch(() => null);
    const missing = (body && Array.isArray(body.missing) && body.missing) || ["nats"];
    return !missing.includes("nats") && !missing.includes("ledger");
  } catch {
    return false;
  }
}

export class ChatConnection {
  /**
   * @param {object} opts
   * @param {string} opts.url             ws(s)://host/chat
   * @param {() => number} opts.afterSeq  the highest committed seq the page holds
   * @param {(frame: object) => void} opts.onFrame
   * @param {(status: string) => void} opts.onStatus
   * @param {() => Promise<boolean>} [opts.checkSignedIn]  asked after repeated failures
   * @param {() => Promise<boolean>} [opts.probeReady]  true when the server is ready again
   */
  constructor(opts) {
    this.url = opts.url;
    this.afterSeq = opts.afterSeq;
    this.onFrame = opts.onFrame;
    this.onStatus = opts.onStatus || (() => {});
    this.checkSignedIn = opts.checkSignedIn || null;
    this.WebSocket = opts.WebSocket || globalThis.WebSocket;
    this.timers = opts.timers || { setTimeout: (f, ms) => setTimeout(f, ms), clearTimeout: (t) => clearTimeout(t) };
    this.random = opts.random || Math.random;
    this.pingEvery = opts.pingEvery ?? 20000;
    this.silenceLimit = opts.silenceLimit ?? 45000;
    this.ws = null;
    this.status = "stopped";
    this.attempt = 0;
    this.retryTimer = null;
    this.pingTimer = null;
    this.lastFrameAt = 0;
    this.stopped = true;
    this.probeReady = opts.probeReady || null;
    this.readyPollMs = opts.readyPollMs ?? READY_POLL_MS;
    this.readyPollCap = opts.readyPollCap ?? READY_POLL_CAP_MS;
    this.polls = 0;
    this.backoffCap = opts.backoffCap ?? BACKOFF_CAP_MS;
    this.pollTimer = null;
    this.polling = false;
    /** Why the newest socket attempt was made: "start", "backoff", "ready", "focus", "online", "resync". */
    this.lastReason = null;
    /** Every reconnect of this page: {reason, at}. */
    this.reconnects = [];
  }

  /** The reconnect policy in force (for the page, its tests and anyone curious). */
  get config() {
    return {
      backoffCapMs: this.backoffCap,
      readyPollMs: this.readyPollMs,
      readyPollCapMs: this.readyPollCap,
      probesReadiness: !!this.probeReady,
    };
  }

  start() {
    this.lastReason = "start";
    this.stopped = false;
    this.attempt = 0;
    this._open();
  }

  stop() {
    this.stopped = true;
    this._clearTimers();
    this._clearPoll();
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      try {
        ws.close(1000, "bye");
      } catch {
        /* already closed */
      }
    }
    this._setStatus("stopped");
  }

  /** Send a frame now if the socket is open; false means the caller must fall back. */
  send(frame) {
    if (!this.ws || this.ws.readyState !== 1) return false;
    try {
      this.ws.send(JSON.stringify(frame));
      return true;
    } catch {
      return false;
    }
  }

  /** Reconnect at once (the browser came back online, the page regained focus, the server is ready). */
  reconnectNow(reason = "online") {
    if (this.stopped || this.status === "live" || this.status === "signed-out") return;
    // An attempt already under way (socket opening) is not cut short, unless readiness says go.
    if (this.ws && this.ws.readyState === 0 && reason !== "ready") return;
    this._clearTimers();
    this._dropSocket();
    this.lastReason = reason;
    this._open();
  }

  _pollReady() {
    if (!this.probeReady || this.pollTimer !== null || this.stopped) return;
    const delay = Math.min(this.readyPollCap, this.readyPollMs * 2 ** Math.min(this.polls, 8));
    this.polls += 1;
    this.pollTimer = this.timers.setTimeout(async () => {
      this.pollTimer = null;
      if (this.stopped || this.status === "live" || this.status === "signed-out") return;
      if (this.ws && this.ws.readyState === 0) return; // an attempt is under way; its close polls again
      let ready = false;
      try {
        ready = await this.probeReady();
      } catch {
        ready = false;
      }
      if (this.stopped || this.status === "live" || this.status === "signed-out") return;
      if (!ready) {
        this._pollReady();
        return;
      }
      // Answering but refusing our socket again and again: are we still signed in?
      if (this.attempt >= 3 && this.checkSignedIn) {
        let ok = true;
        try {
          ok = await this.checkSignedIn();
        } catch {
          ok = true;
        }
        if (this.stopped) return;
        if (!ok) {
          this.stopped = true;
          this._setStatus("signed-out");
          return;
        }
      }
      this.reconnectNow("ready");
    }, delay);
  }

  _setStatus(status) {
    if (this.status === status) return;
    const was = this.status;
    this.status = status;
    if (status === "live" && was === "reconnecting") this.reconnects.push({ reason: this.lastReason, at: Date.now() });
    if (status === "live") this.polls = 0;
    this.onStatus(status);
  }

  _clearTimers() {
    if (this.retryTimer !== null) this.timers.clearTimeout(this.retryTimer);
    if (this.pingTimer !== null) this.timers.clearTimeout(this.pingTimer);
    this.retryTimer = null;
    this.pingTimer = null;
  }

  _clearPoll() {
    if (this.pollTimer !== null) this.timers.clearTimeout(this.pollTimer);
    this.pollTimer = null;
  }

  _dropSocket() {
    const ws = this.ws;
    this.ws = null;
    if (ws) {
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try {
        ws.close();
      } catch {
        /* never opened */
      }
    }
  }

  _open() {
    this._setStatus(this.attempt === 0 && this.status !== "reconnecting" ? "connecting" : "reconnecting");
    let ws;
    try {
      ws = new this.WebSocket(this.url);
    } catch {
      this._scheduleRetry();
      return;
    }
    this.ws = ws;
    ws.onopen = () => {
      if (this.ws !== ws) return;
      this.lastFrameAt = Date.now();
      // Every (re)connect asks for exactly what this page has not seen.
      ws.send(JSON.stringify({ type: "hello", after_seq: this.afterSeq() }));
      this._armPing();
    };
    ws.onmessage = (msg) => {
      if (this.ws !== ws) return;
      this.lastFrameAt = Date.now();
      let frame;
      try {
        frame = JSON.parse(msg.data);
      } catch {
        return;
      }
      if (!frame || typeof frame !== "object") return;
      if (frame.type === "pong") return;
      if (frame.type === "resync") {
        // The server dropped frames for us: start over from our highest seq.
        this._dropSocket();
        this._setStatus("reconnecting");
        this._scheduleRetry(true);
        return;
      }
      if (frame.type === "ready") {
        this.attempt = 0;
        this._setStatus("live");
      }
      this.onFrame(frame);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this._clearTimers();
      if (this.stopped) return;
      if (ev && ev.code === CLOSE_UNAUTHORIZED) {
        this.stopped = true;
        this._setStatus("signed-out");
        return;
      }
      this._setStatus("reconnecting");
      this._scheduleRetry(ev && ev.code === CLOSE_RESYNC);
    };
    ws.onerror = () => {
      /* onclose follows and decides */
    };
  }

  _armPing() {
    if (this.pingTimer !== null) this.timers.clearTimeout(this.pingTimer);
    this.pingTimer = this.timers.setTimeout(() => {
      this.pingTimer = null;
      if (!this.ws) return;
      if (Date.now() - this.lastFrameAt > this.silenceLimit) {
        // A half-open connection: nothing came back for too long.
        this._dropSocket();
        this._setStatus("reconnecting");
        this._scheduleRetry();
        return;
      }
      this.send({ type: "ping" });
      this._armPing();
    }, this.pingEvery);
  }

  _scheduleRetry(soon = false) {
    if (this.stopped) return;
    if (this.probeReady) {
      // Readiness decides when to try again (see _pollReady); a resync goes straight back.
      this.attempt += 1;
      if (soon) this.polls = 0;
      this._pollReady();
      return;
    }
    const delay = soon
      ? backoffDelay(0, { base: 200, random: this.random })
      : backoffDelay(this.attempt, { max: this.backoffCap, random: this.random });
    this.attempt += 1;
    const attempt = this.attempt;
    if (this.retryTimer !== null) this.timers.clearTimeout(this.retryTimer);
    this.retryTimer = this.timers.setTimeout(async () => {
      this.retryTimer = null;
      if (this.stopped) return;
      // A rejected handshake looks like a plain drop: after a few, ask whether we are still signed in.
      if (attempt >= 3 && this.checkSignedIn) {
        let ok = true;
        try {
          ok = await this.checkSignedIn();
        } catch {
          ok = true; // the network is down: keep retrying
        }
        if (this.stopped) return;
        if (!ok) {
          this.stopped = true;
          this._setStatus("signed-out");
          return;
        }
      }
      this.lastReason = soon ? "resync" : "backoff";
      this._open();
    }, delay);
  }
}
