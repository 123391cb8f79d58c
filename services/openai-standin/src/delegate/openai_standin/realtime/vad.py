"""Energy-based voice activity detection over the decoded input audio.

Input is measured in 20 ms frames. A frame is speech when its RMS (16-bit samples,
full scale 32767) reaches `threshold × 1000`: the default 0.5 means RMS ≥ 500, about
-36 dBFS, well above line noise and well below normal speech on a phone. Speech starts
at the first loud frame (`audio_start_ms` reaches back `prefix_padding_ms`, never before
the buffer's start) and stops once `silence_duration_ms` of quiet followed it
(`audio_end_ms` includes that silence, as the real API's does). `semantic_vad` has no
threshold or silence setting: it behaves as server VAD with 0.5 and 500 ms."""

from dataclasses import dataclass
from typing import Any, Literal

from delegate.openai_standin.realtime.audio import rms

FRAME_MS = 20
LEVEL_PER_THRESHOLD = 1000
SEMANTIC_SILENCE_MS = 500


@dataclass(frozen=True)
class VadEvent:
    kind: Literal["started", "stopped"]
    ms: int  # audio_start_ms or audio_end_ms, from the start of the session's input audio
    speech_ms: int = 0  # stopped: from the first to the last loud frame


class Vad:
    def __init__(self, turn_detection: dict[str, Any]) -> None:
        semantic = turn_detection.get("type") == "semantic_vad"
        threshold = 0.5 if semantic else float(turn_detection.get("threshold", 0.5))
        self.level = threshold * LEVEL_PER_THRESHOLD
        self.prefix_ms = 0 if semantic else int(turn_detection.get("prefix_padding_ms", 300))
        self.silence_ms = SEMANTIC_SILENCE_MS if semantic else int(turn_detection.get("silence_duration_ms", 500))
        self.speaking = False
        self._floor_ms = 0
        self._voice_start_ms = 0
        self._loud_end_ms = 0

    def restart(self, floor_ms: int) -> None:
        """Forget any speech in progress (buffer committed or cleared at `floor_ms`)."""
        self.speaking = False
        self._floor_ms = floor_ms

    def step(self, pcm: bytes, start_ms: int) -> VadEvent | None:
        """One frame of 16-bit samples starting at `start_ms`."""
        end_ms = start_ms + FRAME_MS
        loud = rms(pcm) >= self.level
        if not self.speaking:
            if not loud:
                return None
            self.speaking = True
            self._voice_start_ms, self._loud_end_ms = start_ms, end_ms
            return VadEvent("started", max(self._floor_ms, start_ms - self.prefix_ms))
        if loud:
            self._loud_end_ms = end_ms
            return None
        if end_ms - self._loud_end_ms < self.silence_ms:
            return None
        self.speaking = False
        self._floor_ms = end_ms
        return VadEvent("stopped", end_ms, self._loud_end_ms - self._voice_start_ms)
