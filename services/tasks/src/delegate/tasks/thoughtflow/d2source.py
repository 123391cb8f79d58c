"""A run's ledger events as D2 source: one node per step, edges in the order things happened.

A run is a task (``task.*`` events in its span) or an inner-plane activation (its span's
events: the batch it opened with, memory, tool calls and results, the answer, the outcome,
and the broker's signals and decisions when given). A model step that asks for several tools
fans out to them and the next step joins them again; failures and refusals are red, pauses
amber, the end node says how the run ended and how long it took.

Every label is built from untrusted text (page text, tool output, model text, signal
payloads): ``clean`` keeps it to one printable line of bounded length, and ``quote`` makes it
a D2 double-quoted string whose content D2 can only read as text: no markdown block (``|md``
only means something unquoted), no ``{}``/``;``/``|``/``#`` syntax, no ``${}`` substitution,
no line break of its own. Node ids are ours (``n0``, ``n1``, …), never taken from the data.
"""

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from delegate.contracts.events import Event, RunType, SpanOpened, ThoughtflowArtifact

Tone = Literal["start", "model", "tool", "decision", "pause", "warn", "fail", "refused", "end", "quiet", "fold"]

MAX_TITLE = 48
MAX_LABEL = 80  # each line of untrusted text in a node
# A long run keeps its beginning and its end; the middle becomes one node (a picture of a
# thousand steps is neither readable nor quick to lay out).
MAX_NODES = 120
HEAD_NODES = 80

# Fill, stroke and shape per tone (our constants: never data). The run's start and end are
# rounded (an oval grows huge around a long goal or answer).
STYLES: dict[Tone, tuple[str, str, str]] = {
    "start": ("#E8EEFC", "#0D32B2", "rectangle"),
    "model": ("#F7F8FE", "#0D32B2", "rectangle"),
    "tool": ("#EEF6EE", "#2E7D32", "rectangle"),
    "decision": ("#F3EEFC", "#5E35B1", "diamond"),
    "pause": ("#FFF4E0", "#E08A00", "rectangle"),
    "warn": ("#FFF4E0", "#E08A00", "rectangle"),
    "fail": ("#FDECEC", "#C62828", "rectangle"),
    "refused": ("#FDECEC", "#C62828", "rectangle"),
    "end": ("#E6F4EA", "#1B5E20", "rectangle"),
    "quiet": ("#F4F4F6", "#8A8F9E", "rectangle"),
    "fold": ("#FFFFFF", "#8A8F9E", "rectangle"),
}
DASHED: frozenset[Tone] = frozenset({"refused", "fold", "pause"})
ROUNDED: frozenset[Tone] = frozenset({"start", "end"})
# Kinds that add nothing to the picture (or are the picture itself).
SKIPPED = frozenset({"context.usage", "model.usage", "span.closed", "checkpoint", ThoughtflowArtifact.KIND,
                     "task.step.intent"})


def clean(value: object, limit: int = MAX_LABEL) -> str:
    """Untrusted text as one printable line of at most ``limit`` characters."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    # Control characters, line and paragraph separators, bidi overrides, lone surrogates: spaces.
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def quote(text: str) -> str:
    """A D2 double-quoted string holding ``text`` (already ``clean``): backslash, quote and the
    ``$`` of a substitution escaped, so nothing in it is syntax."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def duration(ms: float | None) -> str:
    if ms is None or ms < 0:
        return ""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, seconds = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s" if seconds else f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def _ms(start: datetime | None, end: datetime) -> float | None:
    return (end - start).total_seconds() * 1000 if start is not None else None


@dataclass
class Node:
    title: str  # untrusted parts are cleaned when drawn
    detail: str = ""
    meta: str = ""  # our own words: durations, counts
    tone: Tone = "model"


@dataclass
class Flow:
    """The D2 source of a run, and how much of it there was."""

    source: str
    steps: int  # nodes made from events (steps, tool calls, decisions, the end)
    nodes: int  # nodes drawn


@dataclass
class _Fan:
    """A model step whose calls are drawn side by side, each from the step itself."""

    origin: int
    calls: set[str]
    tails: list[int] = field(default_factory=list)


class _Drawing:
    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.edges: list[tuple[int, int]] = []
        self.frontier: list[int] = []  # what the next node follows from
        self.fan: _Fan | None = None
        self.calls: dict[str, int] = {}  # call id -> its node (a tool.result joins its tool.call)
        self.call_ts: dict[str, datetime] = {}
        self.first_ts: datetime | None = None
        self.last_ts: datetime | None = None
        self.paused_at: datetime | None = None
        self.ended = False
        self.tokens = 0

    def add(self, node: Node, call_id: str | None = None) -> int:
        index = len(self.nodes)
        self.nodes.append(node)
        fan = self.fan
        if fan is not None and call_id is not None and call_id in fan.calls:
            self.edges.append((fan.origin, index))  # one branch of the step's calls
            fan.tails.append(index)
            self.frontier = list(fan.tails)
        else:
            if fan is not None:  # the calls are done: whatever comes next joins them
                self.fan = None
            self.edges.extend((src, index) for src in self.frontier)
            self.frontier = [index]
        if call_id is not None:
            self.calls[call_id] = index
        return index

    def fan_out(self, origin: int, call_ids: list[str]) -> None:
        if len(call_ids) > 1:
            self.fan = _Fan(origin, set(call_ids))


# ---- tasks (``task.*``, data as contracts.tasks says) -----------------------------------


def _task_created(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    d.add(Node(f"task ({clean(data.get('source') or 'owner', 20)})", clean(data.get("goal")), tone="start"))


def _task_started(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    attempt = data.get("attempt")
    if isinstance(attempt, int) and attempt > 1:
        d.add(Node(f"picked up again (attempt {attempt})", "a new runner replays the journal", tone="warn"))
    else:
        d.add(Node("started", meta=_waited(d, e), tone="quiet"))


def _waited(d: _Drawing, e: Event) -> str:
    waited = duration(_ms(d.last_ts, e.ts))
    return f"after {waited}" if waited else ""


def _task_step(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    step = clean(data.get("step"), 8)
    if data.get("type") == "tool":
        ok = data.get("ok") is not False
        ms = data.get("ms")
        if not isinstance(ms, int | float):
            ms = _ms(d.last_ts, e.ts)
        marks = [duration(ms)] + (["side effect"] if data.get("side_effect") else [])
        output = clean(data.get("output"), MAX_LABEL // 2)
        d.add(
            Node(f"step {step}: {clean(data.get('name'), MAX_TITLE)}",
                 f"{_arguments(data.get('arguments'))} → {output}" if output else _arguments(data.get("arguments")),
                 " · ".join(m for m in marks if m), "tool" if ok else "fail"),
            call_id=_str(data.get("call_id")),
        )
        return
    calls = [c for c in data.get("calls") or [] if isinstance(c, dict)]
    tokens = data.get("tokens")
    if isinstance(tokens, int):
        d.tokens += tokens
    text = clean(data.get("text")) or ("calls " + ", ".join(clean(c.get("name"), 30) for c in calls) if calls else "")
    meta = " · ".join(m for m in (duration(_ms(d.last_ts, e.ts)), f"{tokens} tokens" if tokens else "") if m)
    index = d.add(Node(f"step {step}: model", text, meta, "model"))
    d.fan_out(index, [c for c in (_str(c.get("call_id")) for c in calls) if c])


def _task_unknown(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    d.add(Node(f"step {clean(data.get('step'), 8)}: {clean(data.get('name'), MAX_TITLE)}: outcome unknown",
               clean(data.get("reason")), "verify by hand", "warn"), call_id=_str(data.get("call_id")))


def _task_refused(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    d.add(Node(f"refused: {clean(data.get('name'), MAX_TITLE)}", clean(data.get("reason")), "not run", "refused"),
          call_id=_str(data.get("call_id")))


def _task_paused(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    d.paused_at = e.ts
    d.add(Node(f"paused by {clean(data.get('by') or 'owner', 20)}", tone="pause"))


def _task_resumed(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    paused = duration(_ms(d.paused_at, e.ts))
    d.paused_at = None
    d.add(Node(f"resumed by {clean(data.get('by') or 'owner', 20)}", meta=f"paused {paused}" if paused else "",
               tone="pause"))


def _task_screenshot(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    d.add(Node("screenshot", clean(data.get("url")), clean(data.get("file"), 40), "quiet"))


def _task_finished(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    _end(d, e, Node("answer", clean(data.get("answer")), tone="end"))


def _task_failed(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    _end(d, e, Node(f"failed: {clean(data.get('reason') or 'error', 20)}", clean(data.get("error")), tone="fail"))


def _task_cancelled(d: _Drawing, e: Event, data: dict[str, Any]) -> None:
    _end(d, e, Node(f"cancelled by {clean(data.get('by') or 'owner', 20)}", tone="quiet"))


def _end(d: _Drawing, e: Event, node: Node) -> None:
    took = duration(_ms(d.first_ts, e.ts))
    parts = [f"took {took}" if took else "", f"{d.tokens} tokens" if d.tokens else "", node.meta]
    node.meta = " · ".join(p for p in parts if p)
    d.add(node)
    d.ended = True


TASK_KINDS: dict[str, Callable[[_Drawing, Event, dict[str, Any]], None]] = {
    "task.created": _task_created, "task.started": _task_started, "task.step": _task_step,
    "task.step.unknown": _task_unknown, "task.refused": _task_refused, "task.paused": _task_paused,
    "task.resumed": _task_resumed, "task.screenshot": _task_screenshot, "task.finished": _task_finished,
    "task.failed": _task_failed, "task.cancelled": _task_cancelled,
}


# ---- activations (span events) and the broker's signals and decisions ---------------------


def _span_opened(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    if p.get("type") != "activation":
        return  # a task's span: task.created is its start
    signals = [s for s in p.get("signals") or [] if isinstance(s, dict)]
    detail = "; ".join(_signal(s) for s in signals[:4]) + (f"; and {len(signals) - 4} more" if len(signals) > 4 else "")
    d.add(Node(f"activation ({len(signals)} signal{'s' if len(signals) != 1 else ''})", clean(detail), tone="start"))


def _signal(raw: dict[str, Any]) -> str:
    payload = raw.get("payload")
    if not isinstance(payload, dict):
        payload = {}
    said = next((payload[k] for k in ("text", "subject", "goal", "summary", "title", "reason") if payload.get(k)), "")
    kind = clean(raw.get("kind") or "signal", 30)
    return f"{kind}: {clean(said, 40)}" if said else kind


def _inner_signal(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    signal = p.get("signal")
    title = f"signal {clean(p.get('signal_kind') or p.get('type') or 'signal', 30)}"
    detail = clean(_signal(signal)) if isinstance(signal, dict) and signal else ""
    d.add(Node(title, detail, clean(p.get("urgency"), 10), "quiet"))


DECISION_TONES: dict[str, Tone] = {"act": "decision", "coalesce": "decision", "hold": "pause", "drop": "quiet"}


def _inner_decision(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    decision = str(p.get("decision") or "")
    reason = clean(p.get("reason"), 30)
    detail = clean(f"{reason}: {clean(p.get('detail'))}" if p.get("detail") else reason)
    d.add(Node(f"decision: {clean(decision, 12)}", detail, tone=DECISION_TONES.get(decision, "decision")))


def _memory(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    items, elapsed = p.get("items"), p.get("elapsed_ms")
    count = len(items) if isinstance(items, list) else 0
    if not isinstance(elapsed, int | float):
        elapsed = None
    meta = " · ".join(m for m in (f"{count} item{'s' if count != 1 else ''}", duration(elapsed)) if m)
    d.add(Node("memory" + (" (late)" if p.get("late") else ""), clean(p.get("query")), meta, "quiet"))


def _tool_call(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    call_id = _str(p.get("call_id"))
    if call_id:
        d.call_ts[call_id] = e.ts
    d.add(Node(f"tool: {clean(p.get('name'), MAX_TITLE)}", _arguments(p.get("arguments")), tone="tool"),
          call_id=call_id)


def _tool_result(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    call_id = _str(p.get("call_id"))
    output = clean(p.get("output"), MAX_LABEL // 2)
    code = p.get("error_code")
    tone: Tone = "tool" if p.get("ok") else ("refused" if code == "denied" else "fail")
    meta = " · ".join(m for m in (duration(_ms(d.call_ts.get(call_id or ""), e.ts)), clean(code, 20)) if m)
    index = d.calls.get(call_id or "")
    if index is None:  # its call is not among the events given
        d.add(Node(f"tool: {clean(p.get('name'), MAX_TITLE)}", output, meta, tone))
        return
    node = d.nodes[index]
    node.detail = f"{node.detail} → {output}" if node.detail else output
    node.meta, node.tone = meta, tone


def _message(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    who = "answer" if e.role == "assistant" else "owner said"
    d.add(Node(who + (" (stopped)" if p.get("stopped") else ""), clean(p.get("text")), tone="model"))


def _turn_failed(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    d.add(Node(f"turn failed: {clean(p.get('code'), 30)}", clean(p.get("message")), tone="fail"))


OUTCOME_TONES: dict[str, Tone] = {"completed": "end", "failed": "fail", "nothing_to_do": "quiet", "ignored": "quiet"}


def _outcome(d: _Drawing, e: Event, p: dict[str, Any]) -> None:
    status = str(p.get("status") or "")
    channel = clean(p.get("reply_channel"), 20)
    title = clean(status.replace("_", " "), 20) + (f" (by {channel})" if channel else "")
    _end(d, e, Node(title, clean(p.get("summary") or p.get("reason")), tone=OUTCOME_TONES.get(status, "end")))


ACTIVATION_KINDS: dict[str, Callable[[_Drawing, Event, dict[str, Any]], None]] = {
    "span.opened": _span_opened, "inner.signal": _inner_signal, "inner.decision": _inner_decision,
    "memory.retrieved": _memory, "tool.call": _tool_call, "tool.result": _tool_result, "message": _message,
    "turn.failed": _turn_failed, "activation.outcome": _outcome,
}


def _other(d: _Drawing, e: Event) -> None:
    d.add(Node(clean(e.kind, MAX_TITLE), tone="quiet"))


def _arguments(arguments: object) -> str:
    if isinstance(arguments, dict):
        return clean(", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v, default=str)}"
                               for k, v in arguments.items()))
    return clean(arguments)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


# ---- the drawing --------------------------------------------------------------------------


def flow_source(run_type: RunType, events: Sequence[Event]) -> Flow:
    """The D2 source of a run drawn from its events (any order: they are put in timeline order)."""
    d = _Drawing()
    ordered = [e for e in sorted(events, key=lambda e: (e.ts, e.id)) if e.kind not in SKIPPED]
    if not any(_starts(e) for e in ordered):  # the run's own start is not among the events (yet)
        d.add(Node(run_type, "its first events are not in the ledger", tone="start"))
    drawn_before = len(d.nodes)
    for event in ordered:
        if d.first_ts is None:
            d.first_ts = event.ts
        if event.kind in TASK_KINDS:
            data = event.payload.get("data")
            TASK_KINDS[event.kind](d, event, data if isinstance(data, dict) else {})
        elif event.kind in ACTIVATION_KINDS:
            ACTIVATION_KINDS[event.kind](d, event, event.payload)
        else:
            _other(d, event)
        d.last_ts = event.ts
    steps = len(d.nodes) - drawn_before
    if not d.ended:
        d.add(Node("still running" if steps else "nothing happened yet", tone="quiet"))
    nodes, edges = _folded(d.nodes, d.edges)
    return Flow(_source(nodes, edges), steps, len(nodes))


def _starts(event: Event) -> bool:
    opened = event.payload_as(SpanOpened)
    return event.kind == "task.created" or (opened is not None and opened.type == "activation")


def _folded(nodes: list[Node], edges: list[tuple[int, int]]) -> tuple[list[Node], list[tuple[int, int]]]:
    """At most MAX_NODES: the first HEAD_NODES and the last ones, the middle as one node."""
    if len(nodes) <= MAX_NODES:
        return nodes, edges
    tail = MAX_NODES - HEAD_NODES - 1
    first_tail = len(nodes) - tail
    hidden = first_tail - HEAD_NODES
    fold = Node(f"… {hidden} more steps", "not drawn: the run is too long for one picture", tone="fold")
    kept = [*nodes[:HEAD_NODES], fold, *nodes[first_tail:]]

    def where(i: int) -> int:
        if i < HEAD_NODES:
            return i
        return HEAD_NODES if i < first_tail else i - first_tail + HEAD_NODES + 1

    joined: list[tuple[int, int]] = []
    for a, b in edges:
        edge = (where(a), where(b))
        if edge[0] != edge[1] and edge not in joined:
            joined.append(edge)
    return kept, joined


def _source(nodes: list[Node], edges: list[tuple[int, int]]) -> str:
    lines = ["direction: down", "classes: {"]
    for tone, (fill, stroke, shape) in STYLES.items():
        extra = ("; stroke-dash: 4" if tone in DASHED else "") + ("; border-radius: 18" if tone in ROUNDED else "")
        lines.append(f'  {tone}: {{shape: {shape}; style: {{fill: "{fill}"; stroke: "{stroke}"{extra}}}}}')
    lines.append("}")
    for i, node in enumerate(nodes):
        parts = [clean(node.title, MAX_TITLE), clean(node.detail), clean(node.meta)]
        label = "\\n".join(quote(p)[1:-1] for p in parts if p)  # D2's own \n escape: a line break
        lines.append(f'n{i}: "{label}" {{class: {node.tone}}}')
    lines.extend(f"n{a} -> n{b}" for a, b in edges)
    return "\n".join(lines) + "\n"
