"""The NDJSON body: one ``LineIn`` a line, every line checked, blank lines skipped (still counted).

Each line is JSON within ``contracts.limits`` (depth, finite numbers), like every other body.
"""

from collections.abc import Iterator

from delegate.contracts.limits import JsonRefused, loads_bounded

from .lines import ImportLine, Problems, validate_line


def parse_ndjson(body: bytes) -> tuple[list[ImportLine], Problems]:
    lines: list[ImportLine] = []
    problems = Problems()
    for number, raw in _lines(body):
        stripped = raw.strip()
        if not stripped:
            continue
        try:
            data = loads_bounded(stripped)
        except JsonRefused as exc:
            problems.add(number, f"not valid JSON: {exc}")
            continue
        except ValueError:  # ValueError covers bad UTF-8 too
            problems.add(number, "not valid JSON")
            continue
        checked = validate_line(data)
        if isinstance(checked, str):
            problems.add(number, checked)
        else:
            lines.append(ImportLine.of(number, number, checked))
    if not lines and not problems:
        problems.add(0, "the body holds no lines")
    return lines, problems


def _lines(body: bytes) -> Iterator[tuple[int, bytes]]:
    """(line number, line), one at a time: no list of every line, no long step over the body."""
    start, number = 0, 0
    while start <= len(body):
        end = body.find(b"\n", start)
        if end < 0:
            end = len(body)
        number += 1
        yield number, body[start:end]
        start = end + 1
