import assert from "node:assert/strict";
import { test } from "node:test";

import { backoffDelay, ChatConnection, CLOSE_RESYNC, CLOSE_UNAUTHORIZED } from "../../client/js/connection.js";

test("backoff doubles up to the cap, with jitter in the upper half", () => {
  const lo = (a) => backoffDelay(a, { random: () => 0 });
  const hi = (a) => backoffDelay(a, { random: () => 1 });
  assert.deepEqual([0, 1, 2, 3].map(hi), [500, 1000, 2000, 4000]);
  assert.deepEqual([0, 1, 2, 3].map(lo), [250, 500, 1000, 2000]);
  assert.equal(hi(20), 15000);
  assert.equal(lo(20), 7500);
  for (let i = 0; i < 100; i += 1) {
    const d = backoffDelay(4);
    assert.ok(d >= 4000 && d <= 8000, String(d));
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
