"""Thoughtflow: task and activation runs drawn from their ledger events by the real d2 binary,
the SVG made inert, hostile labels kept as text, and a failed render that keeps its D2."""

import base64
import binascii
import html
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from defusedxml.ElementTree import fromstring

from delegate.contracts.events import (
    ActivationOutcome,
    Event,
    InnerDecision,
    InnerSignal,
    MemoryRetrieved,
    Message,
    Payload,
    SpanClosed,
    SpanOpened,
    TaskEvent,
    ThoughtflowArtifact,
    ToolCall,
    ToolResult,
    make_event,
)
from delegate.tasks.thoughtflow import (
    RenderError,
    UnsafeSvg,
    artifact_event,
    draw_run,
    flow_source,
    render_svg,
    sanitize_svg,
)
from delegate.tasks.thoughtflow.d2source import MAX_LABEL, MAX_NODES, STYLES, clean, quote

T0 = datetime(2026, 3, 6, 9, 0, tzinfo=UTC)
# Page text, tool output or model text that tries to be D2 syntax, markdown, markup or a
# terminal escape; the part that fits a label (80 characters) holds all of them.
HOSTILE = (
    "<script>alert(1)</script> |md\n# h\n| }{a: b}; c -> d; \"q\" 's' ${secret} \\ \\\" "
    "<img onerror=alert(2)>\u202e\x00\x1b[31m"
)


class Run:
    """A run's events with increasing timestamps and seqs, as the ledger would hand them over."""

    def __init__(self, span_id: str, conversation_id: str | None = None) -> None:
        self.span_id, self.conversation_id = span_id, conversation_id
        self.events: list[Event] = []

    def add(self, payload: Payload, at: float, *, kind: str | None = None, span: bool = True, **fields: Any) -> Event:
        event = make_event(
            payload, kind=kind, conversation_id=self.conversation_id, span_id=self.span_id if span else None,
            channel="inner", ts=T0 + timedelta(seconds=at), **fields,
        ).with_seq(100 + len(self.events))
        self.events.append(event)
        return event

    def task(self, kind: str, at: float, **data: Any) -> Event:
        return self.add(TaskEvent(task_id=self.span_id, data=data), at, kind=kind)


def task_run(goal: str = "Find the cheapest train from Lisbon to Porto on Friday morning") -> Run:
    run = Run("task-7f3a")
    run.add(SpanOpened(type="task"), 0)
    run.task("task.created", 0.01, goal=goal, start_urls=["https://www.cp.pt"], source="owner")
    run.task("task.started", 1.5, attempt=1)
    run.task("task.step", 3.2, step=1, type="model", tokens=1200, calls=[
        {"call_id": "c1", "name": "browse", "arguments": {"url": "https://www.cp.pt/horarios"}},
        {"call_id": "c2", "name": "search", "arguments": {"q": "Lisboa Porto comboio sexta"}},
    ])
    run.task("task.step", 5.0, step=2, type="tool", call_id="c1", name="browse",
             arguments={"url": "https://www.cp.pt/horarios"}, ok=True, output="Horários: 07:09 IC 24,30 €", ms=1700)
    run.task("task.step", 6.0, step=3, type="tool", call_id="c2", name="search",
             arguments={"q": "Lisboa Porto comboio sexta"}, ok=False, output="timed out after 20 s", ms=20000)
    run.task("task.screenshot", 6.1, step=3, file="step-3.png", url="https://www.cp.pt/horarios")
    run.task("task.refused", 6.5, step=4, call_id="c3", name="send_email", reason="not enabled for this task")
    run.task("task.paused", 7, by="owner")
    run.task("task.resumed", 190, by="owner")
    run.task("task.step", 195, step=5, type="model", text="The 07:09 Intercidades at 24.30 EUR is cheapest.",
             tokens=800)
    run.task("task.finished", 196, answer="Take the 07:09 Intercidades (24.30 EUR).")
    return run


def activation_run() -> Run:
    run = Run("span-act-1", conversation_id="conv-1")
    signal = {"kind": "reminder.due", "id": "sig-1", "source": "timer", "urgency": "normal",
              "payload": {"reminder_id": "r1", "text": "Call the dentist", "due_at": "2026-03-06T09:00:00Z"}}
    sig = run.add(InnerSignal(source="timer", signal_kind="reminder.due", signal=signal), 0, span=False, id="sig-1")
    run.add(InnerDecision(decision="act", reason="due", detail="a reminder is due", activation_id="act-1",
                          signal_ids=["sig-1"]), 0.2, span=False, parent_id=sig.id)
    run.add(SpanOpened(type="activation", activation_id="act-1", signals=[signal]), 0.5)
    run.add(MemoryRetrieved(query="dentist appointment", items=[{"id": "f1"}, {"id": "f2"}], elapsed_ms=84.0), 0.7)
    run.add(ToolCall(call_id="k1", name="calendar_lookup", arguments={"day": "2026-03-06"}), 1.0)
    run.add(ToolResult(call_id="k1", name="calendar_lookup", ok=True, output="free from 14:00"), 2.5)
    run.add(ToolCall(call_id="k2", name="send_sms", arguments={"to": "+15550001111"}), 2.6)
    run.add(ToolResult(call_id="k2", name="send_sms", ok=False, output="not allowed", error_code="denied"), 2.7)
    run.add(Message(text="Reminder: call the dentist; you are free from 14:00."), 3.0, role="assistant")
    run.add(ActivationOutcome(status="completed", summary="Reminded the owner about the dentist",
                              reply_channel="sms"), 3.4)
    run.add(SpanClosed(reason="completed"), 3.5)
    return run


def drawn(svg: bytes) -> tuple[set[str], set[tuple[str, str]]]:
    """The node ids and edges D2 drew: it names each one's group by its id in base64 (then the
    D2 class given to it)."""
    nodes: set[str] = set()
    edges: set[tuple[str, str]] = set()
    for token in re.findall(rb'<g class="([A-Za-z0-9+/=]+)(?: [\w-]+)*"', svg):  # "<id> <D2 class>"
        try:
            name = html.unescape(base64.b64decode(token, validate=True).decode())
        except (binascii.Error, UnicodeDecodeError):
            continue
        if edge := re.fullmatch(r"\((n\d+) -> (n\d+)\)\[\d+\]", name):
            edges.add((edge[1], edge[2]))
        elif re.fullmatch(r"n\d+", name):
            nodes.add(name)
        else:
            raise AssertionError(f"a group D2 drew for something we did not write: {name!r}")
    return nodes, edges


def expected(d2: str) -> tuple[set[str], set[tuple[str, str]]]:
    nodes = set(re.findall(r"^(n\d+): ", d2, re.M))
    edges = set(re.findall(r"^(n\d+) -> (n\d+)$", d2, re.M))
    return nodes, {(a, b) for a, b in edges}


def assert_inert(svg: bytes) -> None:
    assert b"<script" not in svg.lower() and b"foreignobject" not in svg.lower()
    for element in fromstring(svg).iter():
        assert element.tag.rsplit("}", 1)[-1] not in ("script", "foreignObject", "a", "image", "use", "iframe")
        for name, value in element.attrib.items():
            local = name.rsplit("}", 1)[-1]
            assert not local.lower().startswith("on"), (element.tag, name)
            assert "javascript:" not in value.lower(), (element.tag, name)
            if local == "href":
                assert value.startswith("#"), value


def labels(d2: str) -> dict[str, str]:
    return dict(re.findall(r'^(n\d+): "((?:[^"\\]|\\.)*)" \{class: \w+\}$', d2, re.M))


@pytest.mark.integration
async def test_a_task_run_is_drawn_with_its_branches_failures_pause_and_answer(tmp_path: Path) -> None:
    run = task_run()
    artifact = await draw_run("task-7f3a", "task", run.events, tmp_path)

    assert artifact.error is None and artifact.run_type == "task" and artifact.span_id == "task-7f3a"
    assert (artifact.d2_path, artifact.svg_path) == ("thoughtflow/task-7f3a/flow.d2", "thoughtflow/task-7f3a/flow.svg")
    assert artifact.through_seq == run.events[-1].seq and artifact.steps == 11 and artifact.nodes == 11
    d2 = (tmp_path / artifact.d2_path).read_text()
    svg = (tmp_path / str(artifact.svg_path)).read_bytes()
    assert artifact.bytes == len(svg) and svg.startswith(b"<?xml") and artifact.rendered_ms > 0
    assert "direction: down" in d2
    assert not list((tmp_path / "thoughtflow" / "task-7f3a").glob(".*.tmp"))  # atomic writes leave nothing behind

    text = labels(d2)
    assert text["n0"].startswith("task (owner)\\nFind the cheapest train")
    assert text["n2"] == "step 1: model\\ncalls browse, search\\n1.7 s · 1200 tokens"
    assert "{class: fail}" in _line(d2, "step 3: search")  # the failed tool call is red
    assert "{class: refused}" in _line(d2, "refused: send_email")
    assert text["n8"] == "resumed by owner\\npaused 3 min 3 s"
    assert text["n10"].startswith("answer\\nTake the 07:09") and "took 3 min 16 s · 2000 tokens" in text["n10"]
    assert "{class: end}" in _line(d2, "answer")
    # The model step fans out to its two calls, and what comes next (a screenshot) joins them again.
    nodes, edges = drawn(svg)
    assert (nodes, edges) == expected(d2)
    assert {("n2", "n3"), ("n2", "n4"), ("n3", "n5"), ("n4", "n5")} <= edges and ("n3", "n4") not in edges
    assert_inert(svg)
    # ... and still looks like D2 drew it: its styles and embedded fonts survive the sanitizer.
    assert svg.count(b"@font-face") >= 1 and b"data:application/font-woff;base64," in svg and b".fill-N1" in svg


def _line(d2: str, label_start: str) -> str:
    return next(line for line in d2.splitlines() if line.split(": ", 1)[-1].startswith(f'"{label_start}'))


@pytest.mark.integration
async def test_an_activation_run_is_drawn_from_signal_to_outcome(tmp_path: Path) -> None:
    run = activation_run()
    artifact = await draw_run("act-1", "activation", run.events, tmp_path)

    assert artifact.error is None and artifact.span_id == "span-act-1" and artifact.through_seq == 110
    d2 = (tmp_path / artifact.d2_path).read_text()
    svg = (tmp_path / str(artifact.svg_path)).read_bytes()
    order = list(labels(d2).values())
    assert [label.split("\\n")[0] for label in order] == [
        "signal reminder.due", "decision: act", "activation (1 signal)", "memory", "tool: calendar_lookup",
        "tool: send_sms", "answer", "completed (by sms)",
    ]
    # A tool call and its result are one node, timed from the call to the result.
    assert order[4] == "tool: calendar_lookup\\nday=2026-03-06 → free from 14:00\\n1.5 s"
    assert "{class: refused}" in _line(d2, "tool: send_sms") and "denied" in order[5]
    assert "{class: decision}" in _line(d2, "decision: act") and "reminder.due: Call the dentist" in order[2]
    assert order[3] == "memory\\ndentist appointment\\n2 items · 84 ms"
    assert order[-1].endswith("took 3.4 s")
    assert drawn(svg) == expected(d2)
    assert_inert(svg)


@pytest.mark.integration
async def test_hostile_labels_stay_text_and_the_picture_renders(tmp_path: Path) -> None:
    run = task_run(goal=HOSTILE)
    run.task("task.step", 200, step=6, type="tool", call_id=HOSTILE, name=HOSTILE, arguments={HOSTILE: HOSTILE},
             ok=False, output=HOSTILE * 20, ms=5)
    run.task("task.failed", 201, reason="error", error=HOSTILE)
    artifact = await draw_run("task-7f3a", "task", run.events, tmp_path)

    assert artifact.error is None, artifact.error
    d2 = (tmp_path / artifact.d2_path).read_text()
    svg = (tmp_path / str(artifact.svg_path)).read_bytes()
    # Exactly the nodes and edges we wrote: no label became a node, an edge, a style or markdown.
    assert drawn(svg) == expected(d2)
    # ... and every line of the source is ours: direction, classes, one per node, one per edge.
    assert len(d2.splitlines()) == 2 + len(STYLES) + 1 + len(expected(d2)[0]) + len(expected(d2)[1])
    assert "|md" in d2 and "\\${secret}" in d2  # there, but inside quotes and escaped
    for label in labels(d2).values():
        for line in label.split("\\n"):
            assert len(line.replace("\\\\", "\\").replace('\\"', '"').replace("\\$", "$")) <= MAX_LABEL
    # What a person sees is the hostile text itself, as text.
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in svg and b"${secret}" in svg
    assert_inert(svg)


def test_clean_and_quote_leave_nothing_d2_could_read_as_syntax() -> None:
    assert clean("a\nb\r\nc\td\u2028e\x00f\ud800g") == "a b c d e f g"
    assert clean("x" * 200) == "x" * (MAX_LABEL - 1) + "…" and clean(None) == "" and clean({"k": [1]}) == '{"k": [1]}'
    assert quote('say "hi" \\ ${x}') == '"say \\"hi\\" \\\\ \\${x}"'


@pytest.mark.integration
async def test_a_render_failure_keeps_the_d2_and_records_the_error(tmp_path: Path) -> None:
    run = task_run()
    first = await draw_run("task-7f3a", "task", run.events[:5], tmp_path)
    assert first.svg_path is not None and (tmp_path / first.svg_path).exists()

    # No time at all to render: d2 is stopped, the D2 of the newer state is written all the same.
    failed = await draw_run("task-7f3a", "task", run.events, tmp_path, timeout=0)
    assert failed.svg_path is None and failed.bytes == 0
    assert failed.error is not None and "did not finish" in failed.error
    assert (tmp_path / failed.d2_path).read_text() == flow_source("task", run.events).source
    # The older picture would pass for this state of the run: it is gone.
    assert not (tmp_path / first.svg_path).exists()
    assert failed.through_seq > first.through_seq

    with pytest.raises(RenderError, match="d2 exited with"):
        await render_svg("a: {\n")  # d2 itself refuses the source
    with pytest.raises(ValueError, match="not a run id"):
        await draw_run("../etc", "task", run.events, tmp_path)
    with pytest.raises(ValueError, match="not a run type"):
        await draw_run("task-7f3a", "turn", run.events, tmp_path)


@pytest.mark.integration
async def test_what_d2_emits_for_links_icons_and_markdown_is_removed() -> None:
    # Never in our own source; the sanitizer is the second line should it ever get there.
    source = (
        'a: "x" {icon: https://example.invalid/i.png}\n'
        'b: "y" {link: "javascript:alert(1)"; tooltip: "tip"}\n'
        "c: |md\n  # title [link](javascript:alert(2))\n|\n"
        "a -> b -> c\n"
    )
    raw = await render_svg(source)
    assert b"<image" in raw and b"javascript:" in raw  # what d2 itself writes
    clean_svg = sanitize_svg(raw)
    assert_inert(clean_svg)
    assert b"example.invalid" not in clean_svg and b"<text" in clean_svg


def test_the_sanitizer_drops_active_content_and_refuses_what_it_cannot_read() -> None:
    hostile = b"""<?xml version="1.0"?>
<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" onload="alert(1)">
  <script>alert(2)</script>
  <s:script xmlns:s="http://www.w3.org/2000/svg">alert(5)</s:script>
  <set attributeName="onmouseover" to="alert(6)"/>
  <style>@import url(https://example.invalid/x.css); rect { fill: red }</style>
  <style>rect { fill: red } text { background: image-set("https://example.invalid/i.png" 1x) }</style>
  <style>rect { fill: url(#ok) } text { background: url(https://example.invalid/unclosed</style>
  <style>.t { font-family: f } @font-face { src: url("data:font/woff2;base64,AAAA"); }</style>
  <foreignObject><div xmlns="http://www.w3.org/1999/xhtml">hi</div></foreignObject>
  <a href="javascript:alert(3)"><text>link</text></a>
  <image href="https://example.invalid/p.png"/>
  <use xlink:href="https://example.invalid/s.svg#x"/>
  <rect onclick="alert(4)" fill="url(https://example.invalid/g)" stroke="url(#ok)" width="1" height="1"/>
  <marker id="m"><path d="M0 0" xlink:href="#m"/></marker>
  <text x="1" style="fill:red">kept &lt;script&gt;</text>
</svg>"""
    out = sanitize_svg(hostile)
    assert_inert(out)
    assert b"example.invalid" not in out and b"@import" not in out and b"url(#ok)" in out
    assert b"data:font/woff2" in out and b'href="#m"' in out and b"kept &lt;script&gt;" in out
    assert b'style="fill:red"' in out

    bomb = b"""<?xml version="1.0"?><!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>
<svg xmlns="http://www.w3.org/2000/svg"><text>&b;</text></svg>"""
    for refused in (bomb, b"<html><script>alert(1)</script></html>", b"<svg", b""):
        with pytest.raises(UnsafeSvg):
            sanitize_svg(refused)


@pytest.mark.integration
async def test_a_long_run_keeps_its_start_and_end_and_folds_its_middle(tmp_path: Path) -> None:
    run = Run("task-long")
    run.task("task.created", 0, goal="Read every page of the manual", source="agent")
    for step in range(1, 301):
        run.task("task.step", step, step=step, type="model", text=f"page {step}", tokens=10)
    run.task("task.finished", 400, answer="Done.")
    flow = flow_source("task", run.events)
    assert flow.steps == 302 and flow.nodes == MAX_NODES
    text = labels(flow.source)
    assert text["n0"].startswith("task (agent)") and text[f"n{MAX_NODES - 1}"].startswith("answer\\nDone.")
    assert any(label.startswith("… 183 more steps") for label in text.values())
    _, edges = expected(flow.source)
    assert len(edges) == MAX_NODES - 1  # still one unbroken chain from the start to the end
    artifact = await draw_run("task-long", "task", run.events, tmp_path)
    assert artifact.error is None and artifact.nodes == MAX_NODES and artifact.steps == 302


def test_a_run_drawn_before_its_start_is_in_the_ledger_still_has_a_start_and_no_end() -> None:
    run = task_run()
    flow = flow_source("task", run.events[3:6])
    order = list(labels(flow.source).values())
    assert order[0].startswith("task\\n") and order[-1] == "still running"
    assert flow_source("activation", []).source.count("->") == 1  # a start, "nothing happened yet"


def test_the_artifact_event_carries_the_artifact() -> None:
    artifact = ThoughtflowArtifact(run_id="act-1", run_type="activation", d2_path="thoughtflow/act-1/flow.d2",
                                   svg_path="thoughtflow/act-1/flow.svg", bytes=10, through_seq=5)
    event = artifact_event(artifact, conversation_id="conv-1")
    assert event.kind == "thoughtflow.artifact" and event.span_id is None and event.channel == "inner"
    assert Event.model_validate_json(event.model_dump_json()).typed(ThoughtflowArtifact) == artifact
    # The picture's own event is never drawn as a step of the run.
    assert "thoughtflow" not in flow_source("activation", [*activation_run().events, event]).source
