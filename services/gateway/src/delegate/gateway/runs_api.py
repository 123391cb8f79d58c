"""``GET /api/runs/{run_id}/diagram``: the thoughtflow picture of a run (a task or an activation).

The ledger says where the run's newest picture is (``ledger.cmd.artifact``); the file is read
from RUNTIME_DATA_DIR's thoughtflow folder and from nowhere else, whatever the artifact names
(a symlink out of it too). The tasks service sanitized the SVG when it drew it; it is looked at
once more here and refused if it holds a script, and goes out as ``image/svg+xml`` under the
policy ``security.SVG_POLICY`` gives every SVG: it can draw itself and do nothing else.
"""

import logging
import re
from pathlib import Path

import anyio.to_thread
from fastapi import APIRouter, Depends, Response

from delegate.contracts import topics
from delegate.contracts.events import RUN_ID_PATTERN, THOUGHTFLOW_DIR
from delegate.contracts.messages import ArtifactRequest

from .ask import ask
from .deps import BusDep, SettingsDep, require_owner
from .errors import ApiError
from .security import SVG_TYPE

log = logging.getLogger(__name__)

router = APIRouter(prefix="/api", dependencies=[Depends(require_owner)])

SILENT = ("ledger_unavailable", "the ledger is not answering")
STATUS: dict[str, int] = {"unavailable": 503}  # its other refusals are its failure: 502

RUN_ID = re.compile(RUN_ID_PATTERN)
MAX_PICTURE_BYTES = 20 * 1024 * 1024
# A script or HTML island, under any namespace prefix (<svg:script> runs as well as <script>).
ACTIVE = re.compile(rb"<([\w.-]+:)?(script|foreignobject)\b", re.I)


class _Unsafe(Exception):
    """The file may not be served: it lies outside the thoughtflow folder, is too big, or is active."""


@router.get("/runs/{run_id}/diagram")
async def run_diagram(run_id: str, bus: BusDep, settings: SettingsDep) -> Response:
    """200 SVG; 400 a malformed id; 404 no picture of that run (or its file is gone, or its render
    failed: ``error`` says why); 503 the ledger does not answer; 500 a file that is not safe to send."""
    if not RUN_ID.fullmatch(run_id):
        raise ApiError(400, "bad_request", "not a run id (letters, digits, '-' and '_', at most 64)")
    reply = await ask(bus, topics.LEDGER_ARTIFACT, ArtifactRequest(run_id=run_id), silent=SILENT, status=STATUS)
    artifact = reply.artifact
    if artifact is None:
        raise ApiError(404, "not_found", f"no picture of run {run_id} has been drawn")
    if artifact.svg_path is None:
        raise ApiError(404, "not_rendered", f"the picture of run {run_id} could not be rendered",
                       detail=artifact.error or "")
    try:
        svg = await anyio.to_thread.run_sync(read_picture, settings.runtime_data_dir, artifact.svg_path)
    except FileNotFoundError as exc:
        raise ApiError(404, "not_found", f"the picture of run {run_id} is no longer on disk") from exc
    except _Unsafe as exc:
        log.warning("run %s: refused to serve %r: %s", run_id, artifact.svg_path, exc)
        raise ApiError(500, "unsafe_picture", "the run's picture is not safe to show") from exc
    return Response(svg, media_type=SVG_TYPE.decode())


def read_picture(data_dir: Path, relative: str) -> bytes:
    """The file at ``relative`` if it lies inside ``data_dir/thoughtflow`` (after following links)
    and holds nothing active; raises ``FileNotFoundError`` or ``_Unsafe``."""
    root = (data_dir / THOUGHTFLOW_DIR).resolve()
    path = (data_dir / relative).resolve()
    if not path.is_relative_to(root) or path == root:
        raise _Unsafe(f"{relative!r} is outside {THOUGHTFLOW_DIR}/")
    with open(path, "rb") as f:
        data = f.read(MAX_PICTURE_BYTES + 1)
    if len(data) > MAX_PICTURE_BYTES:
        raise _Unsafe(f"more than {MAX_PICTURE_BYTES} bytes")
    if ACTIVE.search(data):
        raise _Unsafe("it holds a script")
    return data
