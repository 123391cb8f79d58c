"""What checking a request against OpenAI's schemas costs the stand-in, against a floor
measured in the same run.

    .venv/bin/python bench/standin_strict.py [--rounds 300] [--turns 40]

Builds a request shaped like the agent's (instructions, --turns user/assistant turns with a
function call and its output every fifth turn, twelve function tools with JSON-schema
parameters, web search, context_management, metadata, streaming) and times, per request:

  floor       json.loads of the body: the parse every request pays anyway
  Python      jsonschema against CreateResponse, and the unknown-parameter walk: what explains
              a refusal (and what checking every request this way would cost)
  the check   what the stand-in runs on every request: jsonschema-rs over the closed schema
  a refusal   the check for the same request with one unknown key deep in the input (fast
              check, then the Python explanation)

Also: reading and compiling the trimmed spec (once per process, at start), and one
Realtime `session.update` as the voice service sends it.
"""

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from delegate.openai_standin import openapi, strict  # noqa: E402
from delegate.openai_standin.unknown_params import unknown_param  # noqa: E402


def agent_like_request(turns: int) -> dict[str, Any]:
    tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": f"tool_{i}",
            "description": "Does one thing for the person. " * 4,
            "parameters": {
                "type": "object",
                "properties": {
                    "title": {"type": "string", "maxLength": 80},
                    "body": {"type": "string"},
                    "when": {"type": ["string", "null"], "format": "date-time"},
                },
                "required": ["title", "body", "when"],
                "additionalProperties": False,
            },
            "strict": True,
        }
        for i in range(12)
    ]
    tools.append({"type": "web_search", "search_context_size": "medium"})
    items: list[dict[str, Any]] = []
    for turn in range(turns):
        items.append({"role": "user", "content": f"Turn {turn}: please remember the plumber comes at nine."})
        if turn % 5 == 4:
            call = f"call_{turn}"
            items.append({"type": "function_call", "call_id": call, "name": "tool_1", "arguments": '{"title":"x"}'})
            items.append({"type": "function_call_output", "call_id": call, "output": '{"ok": true}'})
        items.append({"role": "assistant", "content": "Noted: the plumber comes at nine on Monday."})
    items.append({"role": "user", "content": [{"type": "input_text", "text": "And the tiles?"}]})
    return {
        "model": "gpt-5.5",
        "instructions": "You are Delegate, a concise personal assistant. " * 20,
        "input": items,
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": True,
        "context_management": [{"type": "compaction", "compact_threshold": 200_000}],
        "metadata": {"channel": "chat", "turn": "t1"},
        "store": True,
        "stream": True,
    }


def per_call_ms(fn: Callable[[], object], rounds: int) -> tuple[float, float]:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--turns", type=int, default=40)
    args = parser.parse_args()

    start = time.perf_counter()
    spec = openapi.Spec(json.loads(openapi.SPEC_FILE.read_text(encoding="utf-8")))
    read_ms = (time.perf_counter() - start) * 1000

    body = agent_like_request(args.turns)
    raw = json.dumps(body)
    bad = json.loads(raw)
    bad["input"][-1]["content"][0]["cache"] = True
    start = time.perf_counter()
    assert strict.check_body("responses.create", body, spec) is None  # compiles its validator
    first_ms = (time.perf_counter() - start) * 1000
    start = time.perf_counter()
    assert strict.check_body("responses.create", bad, spec) is not None  # imports jsonschema (Python)
    first_refusal_ms = (time.perf_counter() - start) * 1000
    python = spec.validator(spec.bodies["responses.create"])

    def check(value: dict[str, Any]) -> object:
        return strict.check_body("responses.create", value, spec)
    session = {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "instructions": "You are Delegate on the phone.",
            "audio": {
                "input": {"format": {"type": "audio/pcmu"}, "turn_detection": {"type": "server_vad"}},
                "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"},
            },
            "tools": [{"type": "function", "name": "notes_create", "parameters": {"type": "object"}}],
        },
    }
    assert strict.check_event(session, spec) is None

    create = spec.bodies["responses.create"]
    rows = [
        ("floor: json.loads", per_call_ms(lambda: json.loads(raw), args.rounds)),
        ("jsonschema (Python) alone", per_call_ms(lambda: python.is_valid(body), args.rounds)),
        ("unknown-parameter walk alone", per_call_ms(lambda: unknown_param(spec, create, body), args.rounds)),
        ("the check (closed schema, jsonschema-rs)", per_call_ms(lambda: check(body), args.rounds)),
        ("a refusal (unknown key deep in input)", per_call_ms(lambda: check(bad), args.rounds)),
        ("realtime session.update", per_call_ms(lambda: strict.check_event(session, spec), args.rounds)),
    ]
    floor = rows[0][1][0]
    print(f"request: {len(body['input'])} input items, {len(body['tools'])} tools, {len(raw) / 1024:.0f} KiB JSON")
    print(f"read the trimmed spec: {read_ms:.1f} ms; the first check of a body compiles its validator: "
          f"{first_ms:.1f} ms; the first refusal imports jsonschema: {first_refusal_ms:.1f} ms (once per process)")
    print(f"{'':38} {'p50 ms':>8} {'p99 ms':>8} {'x floor':>8}")
    for name, (p50, p99) in rows:
        print(f"{name:38} {p50:8.3f} {p99:8.3f} {p50 / floor:8.1f}")


if __name__ == "__main__":
    main()
