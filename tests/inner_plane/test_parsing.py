"""Pure functions of the inner plane: how model answers become memory items, state round trips."""

from pathlib import Path

from delegate.contracts.ids import utcnow
from delegate.inner_plane.memory import Episode, _chunks, parse_items
from delegate.inner_plane.state import InnerState, OpenSpan, StateFile


def test_json_items_are_taken_as_they_are() -> None:
    answer = '{"items": [{"kind": "preference", "text": "Likes short answers"}, "Lives in Lisbon"]}'
    assert parse_items(answer) == [
        {"kind": "preference", "text": "Likes short answers"},
        {"kind": "fact", "text": "Lives in Lisbon"},
    ]


def test_fenced_json_and_bare_lists_are_accepted() -> None:
    answer = '```json\n[{"type": "commitment", "fact": "Call Ana on Friday"}]\n```'
    assert parse_items(answer) == [{"type": "commitment", "fact": "Call Ana on Friday", "kind": "commitment",
                                    "text": "Call Ana on Friday"}]
    assert parse_items('{"items": []}') == []


def test_plain_text_becomes_one_free_text_item() -> None:
    assert parse_items("The user likes green tea.") == [{"kind": "note", "text": "The user likes green tea."}]
    assert parse_items("   ") == []


def test_long_transcripts_are_cut_into_bounded_chunks() -> None:
    lines = [f"line {i} " + "x" * 90 for i in range(50)]
    chunks = _chunks(lines, 1000)
    assert all(len(c) <= 1000 for c in chunks)
    assert "\n".join(chunks).split("\n") == lines


async def test_state_file_round_trips_and_survives_garbage(tmp_path: Path) -> None:
    store = StateFile(tmp_path / "inner-plane" / "state.json")
    assert store.load() == InnerState()
    state = InnerState(last_seq=42)
    state.spans["s"] = OpenSpan(span_id="s", conversation_id="c", last_seq=41, last_ts=utcnow())
    await store.save(state)
    assert store.load() == state
    assert not (tmp_path / "inner-plane" / "state.tmp").exists()
    # Owner only: the state holds the continuity capsule.
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert store.path.parent.stat().st_mode & 0o777 == 0o700
    store.path.write_text("{not json")
    assert store.load() == InnerState()


def test_a_checkpoint_answer_becomes_its_episode_and_items() -> None:
    episode = Episode()
    episode.add(
        '```json\n{"summary": "Talked about Ana\'s move.", "decisions": ["Visit in May", ""],'
        ' "open_loops": ["Book the ferry"], "items": [{"type": "fact", "text": "Ana lives in Porto"}]}\n```'
    )
    episode.add('{"summary": "Then about tea.", "decisions": "not a list", "items": []}')  # a second chunk
    assert episode.summary == "Talked about Ana's move.\nThen about tea."
    assert (episode.decisions, episode.open_loops) == (["Visit in May"], ["Book the ferry"])
    assert episode.items == [{"type": "fact", "text": "Ana lives in Porto", "kind": "fact"}]


def test_a_plain_text_checkpoint_answer_has_no_summary_but_keeps_its_note() -> None:
    episode = Episode()
    episode.add("Offline stand-in: I heard you.")
    assert episode.summary is None and (episode.decisions, episode.open_loops) == ([], [])
    assert episode.items == [{"kind": "note", "text": "Offline stand-in: I heard you."}]
