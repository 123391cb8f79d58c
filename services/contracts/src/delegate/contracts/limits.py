"""How deep and how big JSON from outside may be: what the gateway takes, every consumer decodes.

A signal, a task body or an import line passes through several decoders after the gateway:
the inner plane and the ledger read it with pydantic (whose JSON parser stops at about 200
levels, and whose serializer at 255), the timeline page nests it two levels deeper again, the
browser reads it last. The gateway used to accept what it could parse (Python's ``json``:
about 1,000 levels) and publish it; a consumer that could not decode it dead-lettered it, so a
202 meant nothing. One bound, far below every decoder's, checked where the gateway parses and
by the models that carry free-form data, closes that gap.

JSON also has no NaN or Infinity: Python's ``json`` reads the bare words (and ``1e400`` as
infinity) and pydantic writes them back as ``null``, so they are refused as the ledger refuses
them, not silently changed.
"""

import json
import math
from typing import Annotated, Any

from pydantic import AfterValidator

# Containers within containers in one document (``{}`` is 1, ``{"a": []}`` is 2). The payload of
# a signal, at 64 under its body, sits at about 70 in the timeline page that carries it.
MAX_JSON_DEPTH = 64
# The largest JSON body an API route takes (imports have their own, IMPORT_MAX_BYTES).
MAX_JSON_BYTES = 64 * 1024


class JsonRefused(ValueError):
    """The document is well-formed but not one Delegate takes (NaN, Infinity, too deep)."""


class JsonTooDeep(JsonRefused):
    def __init__(self, limit: int) -> None:
        super().__init__(f"nested more than {limit} levels deep (the limit is {limit})")
        self.limit = limit


def json_problem(value: Any, *, depth: int = 1) -> JsonRefused | None:
    """What is wrong with parsed JSON (nested past ``MAX_JSON_DEPTH``, a non-finite number), or
    None. ``depth``: where ``value`` sits in its document (1: it is the document).

    Iterative: a document deep enough to matter would exhaust a recursive walk first.
    """
    stack: list[tuple[Any, int]] = [(value, depth)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            if isinstance(item, float) and not math.isfinite(item):
                return JsonRefused("NaN and Infinity are not JSON numbers")
            continue
        if level > MAX_JSON_DEPTH:
            return JsonTooDeep(MAX_JSON_DEPTH)
        stack.extend((child, level + 1) for child in children if isinstance(child, dict | list | float))
    return None


def _no_constants(name: str) -> Any:
    raise JsonRefused(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise JsonRefused(f"{text[:40]} is too large for a JSON number")
    return number


_DECODER = json.JSONDecoder(parse_constant=_no_constants, parse_float=_finite)


def raw_decode_bounded(text: str, at: int, *, depth: int = 1) -> tuple[Any, int]:
    """One JSON value of ``text`` from index ``at`` (``JSONDecoder.raw_decode``) and the index
    after it, within the bounds of ``loads_bounded``: a long list decoded item by item
    (``depth``: where the value sits in the whole document)."""
    try:
        value, end = _DECODER.raw_decode(text, at)
    except RecursionError as exc:
        raise JsonTooDeep(MAX_JSON_DEPTH) from exc
    problem = json_problem(value, depth=depth)
    if problem is not None:
        raise problem
    return value, end


def loads_bounded(data: bytes | str) -> Any:
    """``json.loads`` that refuses NaN, Infinity, overflowing numbers and documents nested past
    ``MAX_JSON_DEPTH`` (``JsonRefused``); malformed JSON raises ``ValueError`` as ``json.loads`` does."""
    try:
        value = json.loads(data, parse_constant=_no_constants, parse_float=_finite)
    except RecursionError as exc:  # ~1,000 levels: past any limit we would set
        raise JsonTooDeep(MAX_JSON_DEPTH) from exc
    problem = json_problem(value)
    if problem is not None:
        raise problem
    return value


def _bounded(value: Any) -> Any:
    problem = json_problem(value)
    if problem is not None:
        raise ValueError(str(problem))
    if len(json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)) > MAX_JSON_BYTES:
        raise ValueError(f"over {MAX_JSON_BYTES} bytes as JSON")
    return value


# Free-form JSON a caller may put in a bus message: every decoder applies the same bounds.
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded)]
