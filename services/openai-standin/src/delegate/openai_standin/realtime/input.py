"""The input audio buffer: appended audio, measured by the VAD frame by frame.

Audio is consumed in whole VAD frames (20 ms of the input format) so a commit at the
end of speech takes exactly the frames up to that point; a partial frame waits for the
next append (a manual commit takes it too). While nobody speaks, only the last
`prefix_padding_ms` are kept: that is all a coming turn can reach back to."""

from collections.abc import Iterator
from typing import Any

from delegate.openai_standin.realtime import audio
from delegate.openai_standin.realtime.vad import FRAME_MS, Vad, VadEvent

# Unspoken audio kept beyond the prefix padding before trimming (avoids trimming per frame).
_TRIM_SLACK_MS = 1000


class InputBuffer:
    def __init__(self, fmt: dict[str, Any], turn_detection: dict[str, Any] | None) -> None:
        self.fmt = fmt
        self.turn_detection = turn_detection
        self.vad = Vad(turn_detection) if turn_detection is not None else None
        self.position_ms = 0  # all input audio of the session, as the VAD's audio_*_ms count it
        self._frames = bytearray()
        self._partial = bytearray()

    def configure(self, fmt: dict[str, Any], turn_detection: dict[str, Any] | None) -> None:
        if fmt != self.fmt:
            # Bytes of another format cannot be mixed: start the buffer afresh.
            self.fmt = fmt
            self.clear()
        if turn_detection != self.turn_detection:
            self.turn_detection = turn_detection
            self.vad = Vad(turn_detection) if turn_detection is not None else None
            if self.vad is not None:
                self.vad.restart(self.position_ms)

    @property
    def speaking(self) -> bool:
        return self.vad is not None and self.vad.speaking

    def append(self, data: bytes) -> Iterator[VadEvent]:
        """Add audio; yields VAD events as their frames are reached (handle each
        before asking for the next: a commit takes the frames up to that point)."""
        self._partial += data
        frame_bytes = int(FRAME_MS * audio.bytes_per_ms(self.fmt))
        while len(self._partial) >= frame_bytes:
            frame = bytes(self._partial[:frame_bytes])
            del self._partial[:frame_bytes]
            self._frames += frame
            start_ms = self.position_ms
            self.position_ms += FRAME_MS
            if self.vad is None:
                continue
            event = self.vad.step(audio.to_pcm16(frame, self.fmt), start_ms)
            if event is not None:
                yield event
            if not self.vad.speaking:
                self._trim()

    def take(self) -> bytes:
        """Everything buffered (a commit); the buffer starts empty again."""
        data = bytes(self._frames + self._partial)
        self.clear()
        return data

    def clear(self) -> None:
        self._frames.clear()
        self._partial.clear()
        if self.vad is not None:
            self.vad.restart(self.position_ms)

    def empty(self) -> bool:
        return not self._frames and not self._partial

    def _trim(self) -> None:
        assert self.vad is not None
        keep = int((self.vad.prefix_ms + FRAME_MS) * audio.bytes_per_ms(self.fmt))
        if len(self._frames) > keep + _TRIM_SLACK_MS * audio.bytes_per_ms(self.fmt):
            del self._frames[: len(self._frames) - keep]
