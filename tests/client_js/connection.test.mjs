import assert from "node:assert/strict";
import { test } from "node:test";

import { BACKOFF_CAP_MS, READY_POLL_CAP_MS, READY_POLL_MS, backoffDelay, ChatConnection, CLOSE_RESYNC, CLOSE_UNAUTHORIZED } from "../../client/js/connection.js";

test("backoff doubles up to the cap, with jitter in the upper half", () => {
  const lo = (a) => backoffDelay(a, { random: () => 0 });
  const hi = (a) => backoffDelay(a, { random: () => 1 });
  assert.deepEqual([0, 1, 2, 3].map(hi), [500, 1000, 2000, 4000]);
  assert.deepEqual([0, 1, 2, 3].map(lo), [250, 500, 1000, 2000]);
  // Capped at BACKOFF_CAP_MS (5 s): a long outage never means a long wait afterwards.
  assert.equal(hi(20), BACKOFF_CAP_MS);
  assert.equal(BACKOFF_CAP_MS, 5000);
  assert.equal(lo(20), 2500);
  for (let i = 0; i < 100; i += 1) {
    const d = backoffDelay(3);
    assert.ok(d >= 2000 && d <= 4000, String(d));
  }
});

/** A WebSocket stand-in the test drives by hand, plus manual timers. */
function harness(opts = {}) {
  const sockets = [];
  class FakeWS {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      sockets.push(this);
    }
    send(data) {
      this.sent.push(JSON.parse(data));
    }
    close() {
      this.readyState = 3;
    }
    open() {
      this.readyState = 1;
      this.onopen && this.onopen();
    }
    frame(obj) {
      this.onmessage && this.onmessage({ data: JSON.stringify(obj) });
    }
    drop(code = 1006) {
      this.readyState = 3;
      this.onclose && this.onclose({ code });
    }
  }
  const timers = [];
  const clock = {
    setTimeout: (fn, ms) => {
      const t = { fn, ms, done: false };
      timers.push(t);
      return t;
    },
    clearTimeout: (t) => t && (t.done = true),
  };
  const runTimers = async (filter = () => true) => {
    const due = timers.filter((t) => !t.done && filter(t));
    for (const t of due) {
      t.done = true;
      await t.fn();
    }
    return due.map((t) => t.ms);
  };
  const frames = [];
  const statuses = [];
  let seq = opts.seq ?? 0;
  const conn = new ChatConnection({
    url: "ws://host/chat",
    afterSeq: () => seq,
    onFrame: (f) => frames.push(f),
    onStatus: (s) => statuses.push(s),
    WebSocket: FakeWS,
    timers: clock,
    random: () => 0.5,
    pingEvery: 1e9,
    checkSignedIn: opts.checkSignedIn,
    probeReady: opts.probeReady,
  });
  return { conn, sockets, frames, statuses, runTimers, timers, setSeq: (n) => (seq = n) };
}

test("hello carries the highest seq on every (re)connect; ready means live", async () => {
  const hx = harness({ seq: 5 });
  hx.conn.start();
  assert.deepEqual(hx.statuses, ["connecting"]);
  hx.sockets[0].open();
  assert.deepEqual(hx.sockets[0].sent, [{ type: "hello", after_seq: 5 }]);
  hx.sockets[0].frame({ type: "event", event: { id: "e6", seq: 6 } });
  hx.sockets[0].frame({ type: "ready", last_seq: 6 });
  assert.equal(hx.conn.status, "live");
  assert.deepEqual(hx.frames.map((f) => f.type), ["event", "ready"]);
  hx.setSeq(6);
  hx.sockets[0].drop(1006);
  assert.equal(hx.conn.status, "reconnecting");
  const delays = await hx.runTimers((t) => t.ms < 1e9);
  assert.equal(delays.length, 1);
  assert.equal(hx.sockets.length, 2);
  hx.sockets[1].open();
  assert.deepEqual(hx.sockets[1].sent, [{ type: "hello", after_seq: 6 }]);
});

test("backoff grows across failed attempts and resets after ready", async () => {
  const hx = harness();
  hx.conn.start();
  const seen = [];
  for (let i = 0; i < 4; i += 1) {
    hx.sockets[hx.sockets.length - 1].drop();
    seen.push(...(await hx.runTimers((t) => t.ms < 1e9)));
  }
  assert.deepEqual(seen, [375, 750, 1500, 3000]);
  const ws = hx.sockets[hx.sockets.length - 1];
  ws.open();
  ws.frame({ type: "ready" });
  ws.drop();
  assert.deepEqual(await hx.runTimers((t) => t.ms < 1e9), [375]);
});

test("4401 signs out and stops retrying", async () => {
  const hx = harness();
  hx.conn.start();
  hx.sockets[0].open();
  hx.sockets[0].drop(CLOSE_UNAUTHORIZED);
  assert.equal(hx.conn.status, "signed-out");
  assert.deepEqual(await hx.runTimers(), []);
  assert.equal(hx.sockets.length, 1);
});

test("4408 and a resync frame reconnect quickly", async () => {
  const hx = harness();
  hx.conn.start();
  hx.sockets[0].open();
  hx.sockets[0].frame({ type: "ready" });
  hx.sockets[0].drop(CLOSE_RESYNC);
  assert.deepEqual(await hx.runTimers((t) => t.ms < 1e9), [150]);
  hx.sockets[1].open();
  hx.sockets[1].frame({ type: "resync", reason: "slow consumer" });
  assert.equal(hx.conn.status, "reconnecting");
  assert.equal(hx.sockets[1].readyState, 3, "the old socket is closed");
  assert.deepEqual(await hx.runTimers((t) => t.ms < 1e9), [150]);
  assert.equal(hx.sockets.length, 3);
  assert.ok(!hx.frames.some((f) => f.type === "resync"));
});

test("after repeated failures a lost session is noticed", async () => {
  const hx = harness({ checkSignedIn: async () => false });
  hx.conn.start();
  for (let i = 0; i < 3; i += 1) {
    hx.sockets[hx.sockets.length - 1].drop();
    await hx.runTimers((t) => t.ms < 1e9);
  }
  assert.equal(hx.conn.status, "signed-out");
  assert.equal(hx.sockets.length, 3);
});

test("stop closes quietly and send reports whether the frame went out", () => {
  const hx = harness();
  hx.conn.start();
  assert.equal(hx.conn.send({ type: "ping" }), false, "not open yet");
  hx.sockets[0].open();
  assert.equal(hx.conn.send({ type: "message", text: "hi", client_msg_id: "x" }), true);
  hx.conn.stop();
  assert.equal(hx.conn.status, "stopped");
  assert.equal(hx.conn.send({ type: "ping" }), false);
  assert.equal(hx.timers.filter((t) => !t.done && t.ms < 1e9).length, 0);
});

test("garbage frames are ignored", () => {
  const hx = harness();
  hx.conn.start();
  hx.sockets[0].open();
  hx.sockets[0].onmessage({ data: "not json" });
  hx.sockets[0].onmessage({ data: "42" });
  hx.sockets[0].frame({ type: "pong" });
  assert.deepEqual(hx.frames, []);
});

test("while away, readiness is polled and a ready server means an immediate reconnect", async () => {
  let ready = false;
  const probes = [];
  const h = harness({ probeReady: async () => (probes.push(ready), ready) });
  h.conn.start();
  h.sockets[0].open();
  h.sockets[0].frame({ type: "ready", last_seq: 0 });
  assert.equal(h.conn.status, "live");
  h.sockets[0].drop(1012);
  assert.equal(h.conn.status, "reconnecting");
  assert.deepEqual(h.conn.config, { backoffCapMs: BACKOFF_CAP_MS, readyPollMs: READY_POLL_MS, readyPollCapMs: READY_POLL_CAP_MS, probesReadiness: true });
  // Not ready yet: the poll backs off to its cap (never more than 1 s apart); no blind socket attempts.
  const delays = [];
  for (let i = 0; i < 5; i += 1) delays.push(...(await h.runTimers()));
  assert.deepEqual(delays, [250, 500, 1000, 1000, 1000]);
  assert.equal(h.sockets.length, 1);
  // Ready: a socket opens at the very next poll, and the reason says so.
  ready = true;
  await h.runTimers();
  assert.equal(h.sockets.length, 2);
  assert.equal(h.conn.lastReason, "ready");
  h.sockets[1].open();
  assert.deepEqual(h.sockets[1].sent[0], { type: "hello", after_seq: 0 });
  h.sockets[1].frame({ type: "ready", last_seq: 0 });
  assert.deepEqual(h.conn.reconnects.map((r) => r.reason), ["ready"]);
  // Live: nothing left to poll.
  const notPing = (t) => t.ms < 1e9;
  assert.deepEqual(await h.runTimers(notPing), []);
  assert.deepEqual(probes, [false, false, false, false, false, true]);
  // The next outage starts polling from the short delay again.
  h.sockets[1].drop(1012);
  assert.deepEqual(await h.runTimers(notPing), [250]);
});

test("a server that answers but keeps refusing the socket leads to a sign-in check", async () => {
  const h = harness({ probeReady: async () => true, checkSignedIn: async () => false });
  h.conn.start();
  for (let i = 0; i < 3; i += 1) {
    h.sockets[h.sockets.length - 1].drop();
    await h.runTimers();
  }
  h.sockets[h.sockets.length - 1].drop();
  await h.runTimers();
  assert.equal(h.conn.status, "signed-out");
});

test("focus or network back reconnects at once, without cutting an opening socket short", async () => {
  const h = harness();
  h.conn.start();
  h.sockets[0].drop();
  assert.equal(h.conn.status, "reconnecting");
  h.conn.reconnectNow("focus");
  assert.equal(h.sockets.length, 2);
  assert.equal(h.conn.lastReason, "focus");
  h.conn.reconnectNow("online"); // still opening: left alone
  assert.equal(h.sockets.length, 2);
});
