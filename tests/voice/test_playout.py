"""The barge-in bookkeeping on its own: what counts as heard, where an answer is cut."""

from delegate.voice.playout import Playout


def test_played_advances_only_on_echoed_marks_and_the_cut_is_what_was_heard() -> None:
    playout = Playout(bytes_per_ms=8)
    marks = [str(playout.on_audio("item_A", "resp_1", 800)) for _ in range(5)]  # 5 x 100 ms sent
    assert len(set(marks)) == 5 and all(m.startswith("item_A:") for m in marks)
    assert playout.unplayed()
    playout.on_mark(marks[1])  # 200 ms played
    assert playout.played_ms("item_A") == 200
    playout.on_mark(marks[0])  # an older echo never moves it back
    assert playout.played_ms("item_A") == 200

    cut = playout.interrupt("resp_1")
    assert cut is not None and cut.item_id == "item_A" and cut.response_id == "resp_1"
    assert cut.audio_end_ms == 250 and cut.sent_ms == 500  # min(sent, played + 50)
    assert not playout.unplayed()
    # the clear makes the caller's side echo every pending mark: they say nothing about playback
    playout.on_mark(marks[4])
    assert playout.played_ms("item_A") is None
    # and every later delta of the cancelled response is dropped
    assert playout.on_audio("item_A", "resp_1", 800) is None
    assert playout.on_audio("item_B", "resp_2", 800) is not None


def test_nothing_to_cut_once_everything_played() -> None:
    playout = Playout(bytes_per_ms=8)
    last = [playout.on_audio("item_A", "resp_1", 80) for _ in range(3)][-1]
    assert last is not None
    playout.on_mark(str(last))
    assert playout.interrupt(None) is None  # heard in full, and its response is over
    cut = playout.interrupt("resp_1")  # still generating: what comes next would not be heard
    assert cut is not None and cut.audio_end_ms == 30  # never more than was sent


def test_the_cut_never_exceeds_what_was_sent() -> None:
    playout = Playout(bytes_per_ms=48)  # PCM16 24 kHz
    playout.on_audio("item_A", "resp_1", 480)  # 10 ms
    cut = playout.interrupt("resp_1")
    assert cut is not None and cut.audio_end_ms == 10
