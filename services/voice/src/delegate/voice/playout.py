"""What the caller has actually heard: the barge-in bookkeeping (openai-agents-js's Twilio pattern).

The model sends its answer faster than real time and the caller's side buffers it, so "sent" is
not "heard". Each audio chunk relayed is followed by a mark named ``<item_id>:<n>``; the caller's
side echoes a mark once the audio before it has played, and only an echo moves ``played_ms``
forward. When the caller starts talking while sent audio is still unplayed (or the answer is still
being generated), the answer is cut: the caller's buffer is cleared, the response cancelled, and
the model's copy of the item truncated at ``min(sent_ms, played_ms + 50)``: what was heard, plus
the little that was on its way out of the speaker, never more than was sent. Every later delta of
that response is dropped, so not one stale frame follows the clear.

After a clear, the caller's side echoes every pending mark at once (Twilio does): those echoes say
nothing about playback, so the marks are forgotten at the clear and their echoes ignored.
"""

from dataclasses import dataclass, field

# Audio that was leaving the speaker when the caller spoke: counted as heard.
IN_FLIGHT_MS = 50.0


@dataclass
class Playing:
    item_id: str
    response_id: str | None
    sent_ms: float = 0.0
    played_ms: float = 0.0
    marks: dict[str, float] = field(default_factory=dict)  # unechoed mark -> sent_ms when it was sent


@dataclass(frozen=True)
class Interruption:
    item_id: str
    response_id: str | None
    audio_end_ms: int  # what the model's copy keeps
    played_ms: float
    sent_ms: float


class Playout:
    def __init__(self, bytes_per_ms: float) -> None:
        self.bytes_per_ms = bytes_per_ms
        self.current: Playing | None = None
        self.cancelled: set[str] = set()  # responses whose every later delta is dropped
        self._count = 0

    def is_cancelled(self, response_id: str | None) -> bool:
        return response_id is not None and response_id in self.cancelled

    def cancel(self, response_id: str | None) -> None:
        if response_id is not None:
            self.cancelled.add(response_id)

    def on_audio(self, item_id: str, response_id: str | None, size: int) -> str | None:
        """Count ``size`` bytes of the item as sent; the mark to send after them (None: drop the chunk)."""
        if self.is_cancelled(response_id):
            return None
        if self.current is None or self.current.item_id != item_id:
            self.current = Playing(item_id, response_id)
        self.current.sent_ms += size / self.bytes_per_ms
        self._count += 1
        name = f"{item_id}:{self._count}"
        self.current.marks[name] = self.current.sent_ms
        return name

    def on_mark(self, name: str) -> None:
        playing = self.current
        if playing is None or name not in playing.marks:
            return  # an echo after a clear, or of an earlier item: says nothing about what played
        played = playing.marks[name]
        playing.played_ms = max(playing.played_ms, played)
        for other in [n for n, at in playing.marks.items() if at <= played]:
            del playing.marks[other]

    def unplayed(self) -> bool:
        return self.current is not None and bool(self.current.marks)

    def played_ms(self, item_id: str) -> float | None:
        playing = self.current
        return playing.played_ms if playing is not None and playing.item_id == item_id else None

    def interrupt(self, active_response: str | None) -> Interruption | None:
        """Cut the current answer if the caller has not heard all of it, or its response
        (``active_response`` is the running one) would send more; None: nothing to cut."""
        playing = self.current
        generating = active_response is not None and playing is not None and playing.response_id == active_response
        if playing is None or not (playing.marks or generating):
            return None
        self.cancel(playing.response_id)
        end = int(min(playing.sent_ms, playing.played_ms + IN_FLIGHT_MS))
        playing.marks.clear()
        self.current = None
        return Interruption(playing.item_id, playing.response_id, end, playing.played_ms, playing.sent_ms)
