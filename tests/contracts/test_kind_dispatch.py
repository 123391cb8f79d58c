"""Service code tells ledger events apart by payload model, never by the spelling of a kind.

``event.is_kind(Message)`` / ``event.payload_as(Message)`` (issue #28 item 3) make a mistyped or
renamed kind a type error and read the payload by field; ``event.kind == "message"`` would keep
working silently wrong. This reads every service module and refuses a string literal that names
a ledger kind with a model of its own (``PAYLOADS``) in a ``kind ==`` / ``!=`` / ``in (...)``
test. ``task.*`` kinds are not in ``PAYLOADS``: they share one ``TaskEvent``, their kind is what
tells them apart. Where ``kind`` means another vocabulary whose words collide with a ledger kind
(an OpenAI item ``type``, a memory result's kind), the module is listed below with that reason.
"""

import re
from pathlib import Path

from delegate.contracts.events import PAYLOADS

SERVICES = Path(__file__).parents[2] / "services"
COMPARE = re.compile(r'kind\s*(?:==|!=)\s*"([^"]+)"|kind\s*(?:not\s+)?in\s*\(([^)]*)\)')
OTHER_VOCABULARY = {
    "agent/src/delegate/agent/model.py": "Responses output item types ('message', 'function_call')",
    "memory/src/delegate/memory/ranking.py": "memory result kinds ('message', 'fact')",
    "runtime/src/delegate/runtime/memory_context.py": "memory result kinds ('message', 'fact')",
    "openai-standin/": "the stand-in's OpenAI wire items and events",
}


def _ledger_kind_compares() -> list[str]:
    found = []
    for path in sorted(SERVICES.glob("*/src/**/*.py")):
        name = path.relative_to(SERVICES).as_posix()
        if any(name.startswith(prefix) for prefix in OTHER_VOCABULARY):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for match in COMPARE.finditer(line):
                words = [match[1]] if match[1] else re.findall(r'"([^"]+)"', match[2])
                if any(word in PAYLOADS for word in words):
                    found.append(f"{name}:{n}: {line.strip()}")
    return found


def test_no_service_compares_a_ledger_kind_by_its_spelling() -> None:
    assert _ledger_kind_compares() == []


def test_the_check_sees_a_compare_and_every_listed_module_exists() -> None:
    # A regex that matches nothing would pass the test above forever; so would a stale list.
    assert COMPARE.search('if event.kind == "message":') and COMPARE.search('e.kind in ("span.opened", "x")')
    assert not COMPARE.search("if event.is_kind(Message):")
    for prefix in OTHER_VOCABULARY:
        assert (SERVICES / prefix).exists(), prefix
