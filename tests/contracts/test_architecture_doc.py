"""docs/architecture.md stays true: every subject, stream, durable consumer and event kind its
flow tables name exists in ``contracts``, and every subject is one some role uses."""

import re
from pathlib import Path

import pytest

from delegate.contracts import roles, streams, subjects
from delegate.contracts.events import payload_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "architecture.md"
CODE = re.compile(r"`([^`]+)`")
SUBJECT = re.compile(r"^[a-z][a-z-]*\.(evt|cmd|live)\.[a-z0-9_.*<>-]+$")


def _rows() -> list[list[str]]:
    """The cells of every flow table's body rows (| # | hop | subject | stream · durable | events |)."""
    rows = []
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 5 and cells[0].isdigit():
            rows.append(cells)
    return rows


def _pattern(subject: str) -> re.Pattern[str]:
    """A subject of ``subjects`` (``*`` one token, ``>`` the rest) as a regular expression."""
    parts = [r"[^.]+" if t == "*" else (r".+" if t == ">" else re.escape(t)) for t in subject.split(".")]
    return re.compile(r"\.".join(parts))


KNOWN: list[str] = [v for k, v in vars(subjects).items() if k.isupper() and isinstance(v, str)]
# What the table of roles lets some identity publish, subscribe or pull: the subjects in use.
USED: list[str] = sorted(
    {
        subject
        for role in roles.ROLES.values()
        for perms in [roles.permissions(role)]
        for subject in (*perms.publish, *perms.subscribe, *(c.topic.subject for c in role.consumes))
        if not subject.startswith(("$", "_INBOX"))
    }
)


def _exists(named: str, among: list[str]) -> bool:
    """Named exactly, or an instance of a one-token wildcard (``voice.live.in.*``); a stream's
    catch-all (``agent.evt.>``) does not count, or any misspelt ``agent.evt.…`` would pass."""
    concrete = named.replace("<id>", "x").replace("<service>", "agent")
    return named in among or any(_pattern(s).fullmatch(concrete) for s in among if not s.endswith(">"))


def test_the_doc_has_the_four_flows() -> None:
    text = DOC.read_text()
    for title in ("A chat message", "An inbound SMS", "A phone call", "A reminder"):
        assert f". {title}" in text, title
    assert len(_rows()) >= 25


@pytest.mark.parametrize("row", _rows(), ids=lambda row: row[1][:40])
def test_every_name_in_a_hop_exists(row: list[str]) -> None:
    _, _, subject_cell, stream_cell, events_cell = row
    for name in CODE.findall(subject_cell):
        assert SUBJECT.match(name), f"{name!r} is not written as a subject"
        assert _exists(name, KNOWN), f"{name!r} is not in contracts/subjects.py"
        assert _exists(name, USED), f"no role in contracts/roles.py uses {name!r}"
    stream_names = {spec.name for spec in streams.STREAMS}
    durables = {v for k, v in vars(streams).items() if k.isupper() and isinstance(v, str)}
    for pair in stream_cell.split(","):
        names = CODE.findall(pair)
        if not names:
            continue
        assert names[0] in stream_names, f"{names[0]!r} is not a stream of contracts/streams.py"
        for durable in names[1:]:
            assert durable in durables, f"{durable!r} is not a durable consumer of contracts/streams.py"
            assert any(
                c.stream == names[0] and c.durable == durable for r in roles.ROLES.values() for c in r.consumes
            ), f"no role consumes {names[0]} as {durable!r}"
    for kind in CODE.findall(events_cell):
        payload_model(kind)  # raises for a kind no payload model has


def test_the_doc_names_only_existing_subjects_anywhere() -> None:
    """Outside the tables too: any subject-shaped name in the text exists."""
    for name in CODE.findall(DOC.read_text()):
        if SUBJECT.match(name):
            assert _exists(name, KNOWN), name
