// Browser voice audio, pure: PCM16 LE 24 kHz conversion, mic framing, and the playback queue
// (jitter buffer + marks) that the player worklet runs. No DOM, no Web Audio: Node tests it,
// and the worklets import it (AudioWorkletGlobalScope loads ES modules).

export const SAMPLE_RATE = 24000;
/** Mic frames of 20 ms: small enough for a quick turn end, large enough to keep frames few. */
export const FRAME_SAMPLES = 480;
/** Playback starts once ~60 ms are queued, so a late chunk does not stutter the first words. */
export const START_SAMPLES = 1440;
/** Silence this long after the queue ran dry means the answer ended: the next one buffers again. */
export const GAP_SAMPLES = 7200;

/** Float32 [-1, 1] (channels averaged to mono) → PCM16 little-endian bytes. */
export function floatToPcm16Bytes(channels, length = channels.length ? channels[0].length : 0) {
  const out = new ArrayBuffer(length * 2);
  const view = new DataView(out);
  const n = channels.length;
  for (let i = 0; i < length; i += 1) {
    let s = 0;
    for (let c = 0; c < n; c += 1) s += channels[c][i];
    s = n ? s / n : 0;
    if (!(s > -1)) s = -1; // also maps NaN to a clamp, never to a click of garbage
    else if (s > 1) s = 1;
    view.setInt16(i * 2, s < 0 ? Math.round(s * 0x8000) : Math.round(s * 0x7fff), true);
  }
  return out;
}

/** PCM16 little-endian bytes → Float32 samples (an odd trailing byte is ignored). */
export function pcm16BytesToFloat(buffer) {
  const view = ArrayBuffer.isView(buffer) ? new DataView(buffer.buffer, buffer.byteOffset, buffer.byteLength) : new DataView(buffer);
  const n = Math.floor(view.byteLength / 2);
  const out = new Float32Array(n);
  for (let i = 0; i < n; i += 1) out[i] = view.getInt16(i * 2, true) / 0x8000;
  return out;
}

/**
 * Binary frames from the server → Float32 samples, carrying an odd byte over to the next
 * frame, so a sample split across two frames still decodes.
 */
export class Pcm16Decoder {
  constructor() {
    this.carry = null;
  }

  decode(buffer) {
    let bytes = new Uint8Array(buffer);
    if (this.carry !== null) {
      const joined = new Uint8Array(bytes.length + 1);
      joined[0] = this.carry;
      joined.set(bytes, 1);
      bytes = joined;
      this.carry = null;
    }
    if (bytes.length % 2) {
      this.carry = bytes[bytes.length - 1];
      bytes = bytes.subarray(0, bytes.length - 1);
    }
    return pcm16BytesToFloat(new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength));
  }
}

/** Collects the worklet's 128-sample render quanta into frames of `frameSamples`. */
export class FrameAssembler {
  constructor(frameSamples = FRAME_SAMPLES) {
    this.frameSamples = frameSamples;
    this.buffer = new Float32Array(frameSamples);
    this.filled = 0;
  }

  /** Add mono samples; returns the PCM16 LE frames completed (ArrayBuffers). */
  push(samples) {
    const frames = [];
    let i = 0;
    while (i < samples.length) {
      const take = Math.min(this.frameSamples - this.filled, samples.length - i);
      this.buffer.set(samples.subarray(i, i + take), this.filled);
      this.filled += take;
      i += take;
      if (this.filled === this.frameSamples) {
        frames.push(floatToPcm16Bytes([this.buffer]));
        this.filled = 0;
      }
    }
    return frames;
  }
}

/** Averages channels to one mono Float32Array (a fresh one: the caller may keep it). */
export function mixToMono(channels) {
  if (!channels.length) return new Float32Array(0);
  const n = channels[0].length;
  const out = new Float32Array(n);
  for (const ch of channels) for (let i = 0; i < n; i += 1) out[i] += ch[i];
  if (channels.length > 1) for (let i = 0; i < n; i += 1) out[i] /= channels.length;
  return out;
}

/**
 * Answer audio waiting to be played, with marks between the chunks — Twilio's semantics:
 * a mark is echoed once the audio queued before it has played; `clear` drops the audio and
 * echoes every pending mark at once.
 *
 * Jitter buffer: at the start of an answer (and after a clear) playback waits until
 * `startSamples` are queued, or until the first audio has waited that long; after an
 * underrun in the middle of an answer, new audio plays at once (the listener already waits).
 * A dry spell longer than `gapSamples` ends the answer: what comes next buffers again.
 */
export class PlaybackQueue {
  constructor({ startSamples = START_SAMPLES, gapSamples = GAP_SAMPLES } = {}) {
    this.startSamples = startSamples;
    this.gapSamples = gapSamples;
    this.items = []; // {audio: Float32Array, offset} | {mark: name}
    this.queued = 0; // samples not yet played
    this.mode = "waiting"; // "waiting" (jitter buffer filling) | "playing" | "underrun"
    this.waited = 0; // render samples spent waiting: for audio to fill up, or in an underrun
    this.played = 0; // samples played since the start or the last clear
    this.underruns = 0; // times the queue ran dry while playing
  }

  pushAudio(samples) {
    if (!samples.length) return;
    this.items.push({ audio: samples, offset: 0 });
    this.queued += samples.length;
    if (this.mode === "underrun") {
      this.mode = "playing";
      this.waited = 0;
    }
  }

  pushMark(name) {
    this.items.push({ mark: String(name) });
  }

  /** Drop every queued sample; the names of every pending mark (all echoed now). */
  clear() {
    const marks = this.items.filter((it) => it.mark !== undefined).map((it) => it.mark);
    this.items = [];
    this.queued = 0;
    this.mode = "waiting";
    this.waited = 0;
    this.played = 0;
    return marks;
  }

  /** Marks at the head have nothing left before them: they are played. */
  _headMarks(out) {
    while (this.items.length && this.items[0].mark !== undefined) out.push(this.items.shift().mark);
  }

  /**
   * Fill `output` (Float32Array, one render quantum) with the next samples, silence where
   * there are none; returns the names of the marks reached.
   */
  pull(output) {
    const marks = [];
    output.fill(0);
    this._headMarks(marks);
    if (this.mode === "underrun") {
      this.waited += output.length;
      if (this.waited >= this.gapSamples) {
        this.mode = "waiting";
        this.waited = 0;
      }
      return marks;
    }
    if (this.mode === "waiting") {
      if (this.queued === 0) return marks;
      this.waited += output.length;
      if (this.queued < this.startSamples && this.waited < this.startSamples) return marks;
      this.mode = "playing";
    }
    let at = 0;
    while (at < output.length && this.items.length) {
      const head = this.items[0];
      if (head.mark !== undefined) {
        marks.push(this.items.shift().mark);
        continue;
      }
      const take = Math.min(output.length - at, head.audio.length - head.offset);
      output.set(head.audio.subarray(head.offset, head.offset + take), at);
      head.offset += take;
      at += take;
      this.queued -= take;
      this.played += take;
      if (head.offset === head.audio.length) this.items.shift();
    }
    this._headMarks(marks);
    if (this.queued === 0) {
      this.underruns += 1;
      this.mode = "underrun";
      this.waited = output.length - at;
    }
    return marks;
  }
}
