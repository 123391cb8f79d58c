"""No service calls the model unmetered: every OpenAI call site is in ``delegate.runtime.metering``.

The scan lists each call that reaches a billed OpenAI endpoint (a Responses create, stream or
compaction, a Realtime connection, a raw ``post`` to ``/responses``), across every service
but the stand-in, and fails on one made anywhere else: that call would spend money no
``model.usage`` event records.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / "services"
METERING = SERVICES / "runtime" / "src" / "delegate" / "runtime" / "metering.py"
# Attribute chains that end a billed call (``client.responses.create(...)`` and the like).
BILLED_CHAINS = (
    ("responses", "create"), ("responses", "stream"), ("responses", "parse"), ("responses", "compact"),
    ("realtime", "connect"), ("completions", "create"), ("chat", "completions"),
)
# A raw request to a billed path (the agent streams through ``client.post``).
BILLED_PATHS = ("/responses", "/chat/completions", "/realtime")


def _chain(node: ast.expr) -> tuple[str, ...]:
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    return tuple(reversed(names))


def billed_calls(tree: ast.AST) -> list[int]:
    """Lines of the calls in ``tree`` that reach a billed OpenAI endpoint."""
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        chain = _chain(node.func)
        if any(chain[-2:] == pair for pair in BILLED_CHAINS):
            lines.append(node.lineno)
        elif chain and chain[-1] in ("post", "get") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and (
                first.value.startswith(BILLED_PATHS)
            ):
                lines.append(node.lineno)
    return lines


def call_sites() -> dict[Path, list[int]]:
    sites = {}
    for path in sorted(SERVICES.glob("*/src/**/*.py")):
        if "openai-standin" in path.parts:
            continue  # the stand-in serves these endpoints; it calls none
        lines = billed_calls(ast.parse(path.read_text(), str(path)))
        if lines:
            sites[path] = lines
    return sites


def test_every_model_call_goes_through_the_meter() -> None:
    sites = call_sites()
    # The scan finds what it looks for: the meter's own calls are the billed endpoints.
    assert len(sites.get(METERING, [])) == 4, sites
    unmetered = {str(p.relative_to(ROOT)): lines for p, lines in sites.items() if p != METERING}
    assert unmetered == {}, f"model calls that bypass delegate.runtime.metering: {unmetered}"


def test_the_scan_sees_each_kind_of_call() -> None:
    source = """
async def f(client, stream_cls):
    await client.responses.create(model="m", input="x")
    await client.responses.compact(model="m")
    client.realtime.connect(model="m")
    await client.post("/responses", body={}, cast_to=object)
    await client.responses.input_tokens.count(model="m")  # free: counts, bills nothing
"""
    assert sorted(billed_calls(ast.parse(source))) == [3, 4, 5, 6]
