"""Thoughtflow: a D2 picture of how a run went (a task, or an inner-plane activation).

``draw_run(run_id, run_type, events, data_dir)`` writes ``thoughtflow/<run id>/flow.d2`` and
a sanitized ``flow.svg`` under RUNTIME_DATA_DIR and returns the ``ThoughtflowArtifact``;
``artifact_event`` makes it the ledger event the gateway's ``GET /api/runs/{id}/diagram``
finds it by.
"""

from .d2source import Flow, flow_source
from .render import RenderError, artifact_event, draw_run, render_svg
from .sanitize import UnsafeSvg, sanitize_svg

__all__ = [
    "Flow", "RenderError", "UnsafeSvg", "artifact_event", "draw_run", "flow_source", "render_svg", "sanitize_svg",
]
