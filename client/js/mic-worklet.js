// The mic side of a browser call, on the audio thread: each 128-sample render quantum
// (already resampled to the context's 24 kHz) is mixed to mono and gathered into 20 ms
// PCM16 LE frames, posted (transferred) to the page, which sends them as binary frames.

import { FRAME_SAMPLES, FrameAssembler, mixToMono } from "./voice-audio.js";

class MicPcm16 extends AudioWorkletProcessor {
  constructor() {
    super();
    this.frames = new FrameAssembler(FRAME_SAMPLES);
    this.stopped = false;
    this.port.onmessage = (e) => {
      if (e.data && e.data.type === "stop") this.stopped = true;
    };
  }

  process(inputs) {
    if (this.stopped) return false;
    const channels = inputs[0];
    // No input yet (the track is still starting) is not silence to send: nothing is posted.
    if (channels && channels.length) {
      for (const frame of this.frames.push(mixToMono(channels))) this.port.postMessage(frame, [frame]);
    }
    return true;
  }
}

registerProcessor("delegate-mic", MicPcm16);
