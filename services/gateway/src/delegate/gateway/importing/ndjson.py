"""The NDJSON body: one ``LineIn`` a line, every line checked, blank lines skipped (still counted)."""

import json

from .lines import ImportLine, Problems, validate_line


def parse_ndjson(body: bytes) -> tuple[list[ImportLine], Problems]:
    lines: list[ImportLine] = []
    problems = Problems()
    number = 0
    for number, raw in enumerate(body.split(b"\n"), start=1):
        stripped = raw.strip()
        if not stripped:
            continue
        try:
            data = json.loads(stripped)
        except (ValueError, RecursionError):  # ValueError covers bad UTF-8 too
            problems.add(number, "not valid JSON")
            continue
        checked = validate_line(data)
        if isinstance(checked, str):
            problems.add(number, checked)
        else:
            lines.append(ImportLine(line=number, ordinal=number, data=checked))
    if not lines and not problems:
        problems.add(0, "the body holds no lines")
    return lines, problems
