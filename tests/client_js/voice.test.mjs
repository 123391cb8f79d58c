// Browser voice, the pure parts: PCM16 conversion, mic framing, the playback queue (jitter
// buffer and Twilio-style marks), captions, the call indicator and the call's state machine.
import assert from "node:assert/strict";
import { test } from "node:test";

import {
  FRAME_SAMPLES,
  FrameAssembler,
  GAP_SAMPLES,
  PlaybackQueue,
  Pcm16Decoder,
  START_SAMPLES,
  floatToPcm16Bytes,
  mixToMono,
  pcm16BytesToFloat,
} from "../../client/js/voice-audio.js";
import { Captions } from "../../client/js/voice-captions.js";
import {
  CLOSE_BUDGET,
  CLOSE_BUSY,
  MESSAGES,
  MIC_CONSTRAINTS,
  MUTED_HEARTBEAT_MS,
  VoiceCall,
  callUrl,
  formatDuration,
  micError,
  voiceIndicator,
} from "../../client/js/voice.js";

const QUANTUM = 128;

function pull(q, n = 1) {
  const marks = [];
  const out = [];
  for (let i = 0; i < n; i += 1) {
    const buf = new Float32Array(QUANTUM);
    marks.push(...q.pull(buf));
    out.push(buf);
  }
  return { marks, out };
}

const tone = (n, v = 0.5) => new Float32Array(n).fill(v);

// ---- PCM16 -------------------------------------------------------------------------------

test("float to PCM16 is little-endian, asymmetric at the ends, clamped, and mixes channels", () => {
  const bytes = new Uint8Array(floatToPcm16Bytes([Float32Array.from([0, 1, -1, 2, -2, 0.5, NaN])]));
  const view = new DataView(bytes.buffer);
  const values = Array.from({ length: 7 }, (_, i) => view.getInt16(i * 2, true));
  assert.deepEqual(values, [0, 32767, -32768, 32767, -32768, 16384, -32768]);
  assert.deepEqual([...bytes.slice(2, 4)], [0xff, 0x7f]); // 32767, low byte first
  const mixed = new DataView(floatToPcm16Bytes([Float32Array.from([1]), Float32Array.from([0])]));
  assert.equal(mixed.getInt16(0, true), 16384);
});

test("PCM16 bytes back to float, and a sample split across frames still decodes", () => {
  const pcm = new ArrayBuffer(6);
  const v = new DataView(pcm);
  [-32768, 16384, 32767].forEach((x, i) => v.setInt16(i * 2, x, true));
  assert.deepEqual([...pcm16BytesToFloat(pcm)], [-1, 0.5, 32767 / 32768]);
  assert.deepEqual([...pcm16BytesToFloat(new Uint8Array(pcm).subarray(2))], [0.5, 32767 / 32768]);
  const d = new Pcm16Decoder();
  const bytes = new Uint8Array(pcm);
  assert.deepEqual([...d.decode(bytes.slice(0, 3).buffer)], [-1]);
  assert.deepEqual([...d.decode(bytes.slice(3).buffer)], [0.5, 32767 / 32768]);
  assert.equal(d.carry, null);
});

test("the mic is framed in 20 ms PCM16 frames from 128-sample quanta, nothing lost in between", () => {
  assert.equal(FRAME_SAMPLES, 480); // 20 ms at 24 kHz
  const fa = new FrameAssembler();
  const frames = [];
  let value = 0;
  for (let q = 0; q < 15; q += 1) {
    const quantum = new Float32Array(QUANTUM).map(() => ((value++ % 100) - 50) / 100);
    frames.push(...fa.push(quantum));
  }
  assert.equal(frames.length, Math.floor((15 * QUANTUM) / 480));
  assert.ok(frames.every((f) => f.byteLength === 960));
  const all = frames.flatMap((f) => [...pcm16BytesToFloat(f)]);
  assert.equal(all.length, 4 * 480);
  // Sample 130 of the stream sits in the first frame, after the first quantum's boundary.
  assert.ok(Math.abs(all[130] - ((130 % 100) - 50) / 100) < 1e-4);
  assert.equal(fa.filled, 15 * QUANTUM - 4 * 480);
  assert.deepEqual([...mixToMono([Float32Array.from([1, 0]), Float32Array.from([0, 0])])], [0.5, 0]);
});

// ---- playback queue ----------------------------------------------------------------------

test("playback waits for ~60 ms of audio before it starts, then plays it in order", () => {
  assert.equal(START_SAMPLES, 1440);
  const q = new PlaybackQueue();
  q.pushAudio(tone(480, 0.25));
  let { out } = pull(q);
  assert.ok(out[0].every((x) => x === 0), "not yet: only 20 ms queued");
  q.pushAudio(tone(960, 0.5));
  ({ out } = pull(q));
  assert.equal(q.mode, "playing");
  assert.equal(out[0][0], 0.25);
  assert.equal(q.queued, 1440 - QUANTUM);
});

test("a trickle that never reaches 60 ms still plays once it has waited that long", () => {
  const q = new PlaybackQueue();
  q.pushAudio(tone(200));
  const quanta = Math.ceil(START_SAMPLES / QUANTUM);
  const { out } = pull(q, quanta);
  assert.ok(out.slice(0, -1).every((b) => b.every((x) => x === 0)));
  assert.equal(out[quanta - 1][0], 0.5);
});

test("after an underrun mid-answer new audio plays at once; after a long gap it buffers again", () => {
  const q = new PlaybackQueue();
  q.pushAudio(tone(1500));
  pull(q, 12); // 1536 samples: drained mid-quantum
  assert.equal(q.mode, "underrun");
  assert.equal(q.underruns, 1);
  q.pushAudio(tone(100, 0.75));
  let { out } = pull(q);
  assert.equal(out[0][0], 0.75, "resumes at once");
  assert.equal(out[0][100], 0);
  // A long silence: the answer is over, the next one waits for its jitter buffer.
  pull(q, Math.ceil(GAP_SAMPLES / QUANTUM) + 1);
  assert.equal(q.mode, "waiting");
  q.pushAudio(tone(100, 0.75));
  ({ out } = pull(q));
  assert.equal(out[0][0], 0);
});

test("a mark is echoed only when the audio queued before it has played", () => {
  const q = new PlaybackQueue({ startSamples: 0 });
  q.pushAudio(tone(200));
  q.pushMark("1");
  q.pushAudio(tone(40));
  q.pushMark("2");
  q.pushAudio(tone(60));
  q.pushMark("3");
  let { marks } = pull(q); // 128 of the first 200
  assert.deepEqual(marks, []);
  ({ marks } = pull(q)); // the other 72, all 40 of chunk 2, 16 of chunk 3
  assert.deepEqual(marks, ["1", "2"]);
  ({ marks } = pull(q));
  assert.deepEqual(marks, ["3"]);
  assert.equal(q.played, 300);
  // A mark with nothing before it is "played" at the next quantum.
  q.pushMark("4");
  assert.deepEqual(pull(q).marks, ["4"]);
});

test("a mark waits for the jitter buffer too: nothing has played yet", () => {
  const q = new PlaybackQueue();
  q.pushAudio(tone(480));
  q.pushMark("a");
  assert.deepEqual(pull(q).marks, []);
});

test("clear drops the queue at once and returns every pending mark", () => {
  const q = new PlaybackQueue({ startSamples: 0 });
  q.pushAudio(tone(1000));
  q.pushMark("x");
  q.pushAudio(tone(1000));
  q.pushMark("y");
  pull(q);
  assert.deepEqual(q.clear(), ["x", "y"]);
  assert.equal(q.queued, 0);
  const { marks, out } = pull(q);
  assert.deepEqual(marks, []);
  assert.ok(out[0].every((x) => x === 0), "zero stale samples after a clear");
  assert.deepEqual(q.clear(), []);
});

// ---- the pure page helpers ---------------------------------------------------------------

test("call URL: same origin, ws or wss, preset as a query parameter", () => {
  assert.equal(callUrl({ protocol: "http:", host: "127.0.0.1:8000" }), "ws://127.0.0.1:8000/browser-call");
  assert.equal(callUrl({ protocol: "https:", host: "d.example" }, "calm & slow"), "wss://d.example/browser-call?preset=calm%20%26%20slow");
});

test("durations read mm:ss, h:mm:ss past an hour, never negative", () => {
  assert.equal(formatDuration(133_400), "02:13");
  assert.equal(formatDuration(0), "00:00");
  assert.equal(formatDuration(-5000), "00:00");
  assert.equal(formatDuration(3_723_000), "1:02:03");
});

test("getUserMedia refusals map to words the person can act on", () => {
  assert.equal(micError({ name: "NotAllowedError" }), "mic_denied");
  assert.equal(micError({ name: "NotFoundError" }), "no_mic");
  assert.equal(micError(new Error("x")), "mic_failed");
  assert.equal(MESSAGES.mic_denied, "Microphone access was denied — allow it in the browser's site settings to talk to Delegate");
  assert.deepEqual(MIC_CONSTRAINTS.audio, { echoCancellation: true, noiseSuppression: true, autoGainControl: true, channelCount: 1 });
});

test("the indicator: phone or voice call live with its time, busy unless it is this tab's own call", () => {
  const started = "2026-01-05T09:00:00.000000Z";
  const now = Date.parse("2026-01-05T09:02:13Z");
  assert.equal(voiceIndicator(null, now).show, false);
  assert.equal(voiceIndicator({ active: false, status: "idle" }, now).show, false);
  const phone = voiceIndicator({ active: true, kind: "phone", status: "live", session_id: "S1", started_at: started }, now);
  assert.deepEqual(phone, { show: true, text: "Phone call live · 02:13", busy: true, reason: MESSAGES.busy, kind: "phone" });
  const mine = voiceIndicator({ active: true, kind: "browser", status: "live", session_id: "S2", started_at: started }, now, "S2");
  assert.equal(mine.text, "Voice call live · 02:13");
  assert.equal(mine.busy, false);
  assert.equal(voiceIndicator({ active: true, kind: "browser", status: "connecting" }, now).text, "Voice call connecting…");
});

test("captions: running or delta transcripts grow one bubble per turn; the committed message replaces it", () => {
  const c = new Captions();
  const commit = (role, text, channel = "browser_voice") => c.committed({ kind: "message", channel, role, payload: { text } });
  assert.equal(c.add({ role: "user", text: "", final: false }), false);
  c.add({ role: "user", text: "what is", final: false });
  c.add({ role: "user", text: "what is the time", final: false }); // running
  c.add({ role: "assistant", text: "It is", final: false });
  c.add({ role: "assistant", text: " noon.", final: false }); // delta
  assert.deepEqual(c.items.map((x) => [x.role, x.text, x.final]), [["user", "what is the time", false], ["assistant", "It is noon.", false]]);
  c.add({ role: "user", text: "What is the time?", final: true });
  c.add({ role: "user", text: "thanks", final: false }); // the next turn: a new bubble
  assert.equal(c.items.length, 3);
  assert.equal(commit("user", "What is the time?", "text"), false, "another channel's message");
  assert.equal(commit("user", "What is  the time?"), true);
  assert.deepEqual(c.items.map((x) => x.text), ["It is noon.", "thanks"]);
  assert.equal(c.clear(), true);
});

test("captions: a commit before its caption, a cut-off answer, a caption still growing", () => {
  const c = new Captions();
  const commit = (role, text) => c.committed({ kind: "message", channel: "browser_voice", role, payload: { text } });
  // The greeting was written before the page attached; its caption arrives afterwards.
  assert.equal(commit("assistant", "Hi, it's Delegate."), false);
  c.add({ role: "assistant", text: "Hi, it's", final: false });
  assert.equal(c.items.length, 1, "still growing: it stays until final");
  c.add({ role: "assistant", text: "Hi, it's Delegate.", final: true });
  assert.equal(c.items.length, 0);
  // The answer was cut off by a barge-in: the ledger keeps what was played.
  c.add({ role: "assistant", text: "Your sister is called Ingrid, as you", final: false });
  assert.equal(commit("assistant", "Your sister is called"), true);
  // The commit came before the final transcript, the caption so far a prefix of it.
  c.add({ role: "user", text: "stop", final: false });
  assert.equal(commit("user", "Stop, thank you."), false, "not the same words");
  c.add({ role: "user", text: "Stop, thank you.", final: true });
  assert.equal(c.items.length, 0);
  c.add({ role: "user", text: "Stop, thank", final: false });
  assert.equal(commit("user", "Stop, thank you."), true);
  assert.deepEqual(c.visible(), [], "hidden at once");
  // Its last frames do not bring it back, and the final one lets it go.
  assert.equal(c.add({ role: "user", text: " you.", final: false }), false);
  c.add({ role: "user", text: "Stop, thank you.", final: true });
  assert.deepEqual(c.visible(), []);
  assert.deepEqual(c.items, []);
  c.add({ role: "user", text: "Next", final: false });
  assert.deepEqual(c.visible().map((x) => x.text), ["Next"]);
});

// ---- the call's state machine ------------------------------------------------------------

function callHarness({ denied = null } = {}) {
  const sockets = [];
  class FakeWS {
    constructor(url) {
      this.url = url;
      this.readyState = 0;
      this.sent = [];
      this.bufferedAmount = 0;
      this.closed = null;
      sockets.push(this);
    }
    send(data) {
      this.sent.push(typeof data === "string" ? JSON.parse(data) : data);
    }
    close(code) {
      this.readyState = 3;
      this.closed = code;
    }
    open() {
      this.readyState = 1;
    }
    text(obj) {
      this.onmessage && this.onmessage({ data: JSON.stringify(obj) });
    }
    binary(buf) {
      this.onmessage && this.onmessage({ data: buf });
    }
    drop(code) {
      this.readyState = 3;
      this.onclose && this.onclose({ code });
    }
  }
  const audio = { started: false, closed: false, played: [], log: [], hooks: null };
  const tracks = [{ enabled: true, stopped: false, stop() { this.stopped = true; } }];
  const stream = { getTracks: () => tracks, getAudioTracks: () => tracks };
  const timers = [];
  let now = 1000;
  const changes = [];
  const transcripts = [];
  const call = new VoiceCall({
    url: "ws://h/browser-call",
    getUserMedia: async (c) => {
      assert.deepEqual(c, MIC_CONSTRAINTS);
      if (denied) throw Object.assign(new Error("no"), { name: denied });
      return stream;
    },
    createAudio: () => ({
      async start(s, hooks) {
        assert.equal(s, stream);
        audio.started = true;
        audio.hooks = hooks;
      },
      play: (b) => audio.log.push(["audio", b.byteLength]),
      mark: (n) => audio.log.push(["mark", n]),
      clear: () => audio.log.push(["clear"]),
      close: () => (audio.closed = true),
    }),
    WebSocket: FakeWS,
    now: () => now,
    timers: { setTimeout: (fn, ms) => timers.push({ fn, ms }) && timers[timers.length - 1], clearTimeout: (t) => t && (t.done = true) },
    onChange: (info) => changes.push(info.status),
    onTranscript: (f) => transcripts.push(f),
  });
  return { call, sockets, audio, tracks, timers, changes, transcripts, tick: (ms) => (now += ms) };
}

async function liveCall() {
  const hx = callHarness();
  await hx.call.start();
  const ws = hx.sockets[0];
  ws.open();
  ws.text({ type: "state", status: "connecting", session_id: null });
  ws.text({ type: "state", status: "live", session_id: "S1" });
  return { ...hx, ws };
}

test("a call goes starting → connecting → live, sends mic frames only while live and unmuted", async () => {
  const hx = callHarness();
  const started = hx.call.start();
  assert.equal(hx.call.status, "starting");
  await started;
  assert.equal(hx.call.status, "connecting");
  const ws = hx.sockets[0];
  assert.equal(ws.url, "ws://h/browser-call");
  assert.equal(ws.binaryType, "arraybuffer");
  ws.open();
  hx.audio.hooks.onFrame(new ArrayBuffer(960)); // before live: the server is not relaying yet
  assert.equal(ws.sent.length, 0);
  ws.text({ type: "state", status: "live", session_id: "S1" });
  assert.equal(hx.call.status, "live");
  assert.equal(hx.call.info.sessionId, "S1");
  hx.audio.hooks.onFrame(new ArrayBuffer(960));
  assert.equal(ws.sent.length, 1);
  assert.ok(ws.sent[0] instanceof ArrayBuffer);
  hx.call.toggleMute();
  assert.equal(hx.tracks[0].enabled, false);
  hx.audio.hooks.onFrame(new ArrayBuffer(960));
  hx.tick(MUTED_HEARTBEAT_MS - 1);
  hx.audio.hooks.onFrame(new ArrayBuffer(960));
  // muted: no audio, only a heartbeat now and then (the server ends a call that sends neither)
  assert.deepEqual(ws.sent.slice(1), [{ type: "heartbeat" }]);
  hx.tick(1);
  hx.audio.hooks.onFrame(new ArrayBuffer(960));
  assert.deepEqual(ws.sent.slice(1), [{ type: "heartbeat" }, { type: "heartbeat" }]);
  ws.sent.length = 1;
  hx.call.toggleMute();
  ws.bufferedAmount = 10 ** 6; // a stalled socket: frames are dropped, not queued up
  hx.audio.hooks.onFrame(new ArrayBuffer(960));
  assert.equal(ws.sent.length, 1);
  assert.equal(hx.call.stats.framesDropped, 1);
  assert.deepEqual(hx.changes.slice(0, 3), ["starting", "connecting", "live"]);
});

test("server audio, marks and clear go to the player in order; played marks are echoed", async () => {
  const { call, ws, audio, transcripts } = await liveCall();
  ws.binary(new ArrayBuffer(4800));
  ws.text({ type: "mark", name: "1" });
  ws.text({ type: "clear" });
  ws.text({ type: "transcript", role: "assistant", text: "Hi", final: false });
  assert.deepEqual(audio.log, [["audio", 4800], ["mark", "1"], ["clear"]]);
  assert.deepEqual(transcripts, [{ type: "transcript", role: "assistant", text: "Hi", final: false }]);
  audio.hooks.onMarks(["1"], true);
  assert.deepEqual(ws.sent, [{ type: "mark", name: "1" }]);
  assert.equal(call.stats.marksEchoed, 1);
});

test("hang up sends hangup, stops the mic at once and closes once the server says ended", async () => {
  const { call, ws, audio, tracks, tick } = await liveCall();
  tick(61_000);
  call.hangup();
  assert.deepEqual(ws.sent, [{ type: "hangup" }]);
  assert.equal(call.status, "ending");
  assert.equal(audio.closed, true);
  assert.equal(tracks[0].stopped, true);
  ws.text({ type: "state", status: "ended", session_id: "S1", reason: "caller_hangup", message: "the call ended" });
  assert.equal(call.status, "ended");
  assert.equal(ws.closed, 1000);
  assert.equal(call.info.endedAt - call.info.liveAt, 61_000);
  assert.equal(call.info.error, null);
});

test("hang up still ends the call when the server never answers", async () => {
  const { call, timers } = await liveCall();
  call.hangup();
  assert.equal(timers.length, 1);
  timers[0].fn();
  assert.equal(call.status, "ended");
  assert.equal(call.info.reason, "hangup");
});

test("busy: an error frame or close 4409 ends the call with the busy message", async () => {
  const a = callHarness();
  await a.call.start();
  a.sockets[0].open();
  a.sockets[0].text({ type: "error", code: "busy", message: "another call is in progress" });
  assert.equal(a.call.status, "ended");
  assert.equal(a.call.info.message, "The line is busy: another call is live.");
  const b = callHarness();
  await b.call.start();
  b.sockets[0].drop(CLOSE_BUSY);
  assert.equal(b.call.info.error, "busy");
});

test("budget: close 4402 ends the call saying the spending limit is reached, with the server's figures", async () => {
  const hx = callHarness();
  await hx.call.start();
  hx.sockets[0].open();
  const figures = "Your spending limit is reached: today's spend is $0.75 of $0.50.";
  hx.sockets[0].text({ type: "error", code: "budget", message: figures });
  hx.sockets[0].drop(CLOSE_BUDGET);
  assert.equal(hx.call.info.error, "budget");
  assert.equal(hx.call.info.message, MESSAGES.budget);
  assert.equal(hx.call.info.detail, figures);
});

test("mic denied: a clear message and no socket at all", async () => {
  const hx = callHarness({ denied: "NotAllowedError" });
  await hx.call.start();
  assert.equal(hx.sockets.length, 0);
  assert.equal(hx.call.status, "ended");
  assert.equal(hx.call.info.message, MESSAGES.mic_denied);
  assert.equal(hx.audio.closed, true, "the AudioContext made for the call is closed again");
});

test("a socket that drops mid-call ends it as dropped; one refused while connecting as unavailable", async () => {
  const { call, ws } = await liveCall();
  ws.drop(1006);
  assert.equal(call.info.error, "dropped");
  const hx = callHarness();
  await hx.call.start();
  hx.sockets[0].text({ type: "error", code: "voice_unavailable", message: "the voice service is not answering" });
  hx.sockets[0].drop(1013);
  assert.equal(hx.call.info.error, "unavailable");
  assert.equal(hx.call.info.detail, "the voice service is not answering");
});
