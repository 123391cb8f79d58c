// The answer side of a browser call, on the audio thread: a PlaybackQueue (jitter buffer
// and marks, see voice-audio.js) drained one render quantum at a time. Messages in:
// {type:"audio", samples: Float32Array}, {type:"mark", name}, {type:"clear"}, {type:"stop"}.
// Out: {type:"marks", names, cleared} whenever marks are reached or dropped by a clear.

import { PlaybackQueue } from "./voice-audio.js";

class Player extends AudioWorkletProcessor {
  constructor() {
    super();
    this.queue = new PlaybackQueue();
    this.stopped = false;
    this.port.onmessage = (e) => this.onMessage(e.data || {});
  }

  onMessage(msg) {
    if (msg.type === "audio" && msg.samples instanceof Float32Array) this.queue.pushAudio(msg.samples);
    else if (msg.type === "mark") this.queue.pushMark(msg.name);
    else if (msg.type === "clear") {
      const names = this.queue.clear();
      this.port.postMessage({ type: "marks", names, cleared: true });
    } else if (msg.type === "stop") this.stopped = true;
  }

  process(_inputs, outputs) {
    if (this.stopped) return false;
    const out = outputs[0];
    if (!out || !out.length) return true;
    const names = this.queue.pull(out[0]);
    for (let c = 1; c < out.length; c += 1) out[c].set(out[0]);
    if (names.length) this.port.postMessage({ type: "marks", names, cleared: false });
    return true;
  }
}

registerProcessor("delegate-player", Player);
