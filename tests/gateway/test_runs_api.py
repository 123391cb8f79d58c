"""``GET /api/runs/{id}/diagram`` against a real gateway and ledger: the picture the tasks
service's drawing code wrote, found through the ledger's thoughtflow_artifacts, served as an
inert SVG to the owner only; unknown, failed, missing, escaping and scripted pictures refused.

Artifacts reach the ledger as the tasks service sends them, as thoughtflow.artifact events,
here on the test identity's own subject (``ledger.evt.append.test``: not a singleton, so
no fence is needed).
"""

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import ThoughtflowArtifact
from delegate.contracts.messages import ArtifactRequest
from delegate.runtime.bus import Bus, BusUnavailable, RemoteError
from delegate.tasks.thoughtflow import artifact_event, draw_run
from tests.support.system import System, module_system, probe_bus
from tests.support.waiting import eventually
from tests.tasks.test_thoughtflow import activation_run, assert_inert, task_run

from .helpers import PATIENT_S

pytestmark = [pytest.mark.integration]

SVG_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:"


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[System]:
    with module_system(tmp_path_factory.mktemp("runs-api"), request, "ledger", "gateway",
                       separate=("ledger",)) as system:
        yield system


@pytest.fixture
async def bus(running: System) -> AsyncIterator[Bus]:
    async with probe_bus(running) as bus:
        yield bus


async def record(bus: Bus, artifact: ThoughtflowArtifact) -> None:
    """Publish the artifact's event and wait until the ledger answers with it."""
    event = artifact_event(artifact)
    await bus.publish(topics.ledger_append("test"), event)

    async def indexed() -> bool:
        try:
            reply = await bus.request(topics.LEDGER_ARTIFACT, ArtifactRequest(run_id=artifact.run_id))
        except (BusUnavailable, RemoteError):
            return False
        return reply.event_id == event.id

    await eventually(indexed, what=f"the artifact of {artifact.run_id} indexed")


def error_of(reply: httpx.Response) -> str:
    assert reply.headers["content-type"].startswith("application/json"), reply.headers
    code: str = reply.json()["error"]["code"]
    return code


async def test_the_owner_gets_a_runs_picture_as_an_inert_svg(
    running: System, bus: Bus, http: httpx.AsyncClient
) -> None:
    for run_id, run_type, run in (("task-7f3a", "task", task_run()), ("act-1", "activation", activation_run())):
        artifact = await draw_run(run_id, run_type, run.events, running.runtime)
        assert artifact.svg_path is not None
        await record(bus, artifact)

        reply = await http.get(f"/api/runs/{run_id}/diagram")
        assert reply.status_code == 200, reply.text
        assert reply.headers["content-type"] == "image/svg+xml"
        assert reply.headers["content-security-policy"] == SVG_POLICY
        assert reply.headers["x-content-type-options"] == "nosniff"
        assert reply.headers["cache-control"] == "no-store"
        assert reply.content == (running.runtime / artifact.svg_path).read_bytes()
        assert_inert(reply.content)

    # Owner only, as every /api route.
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=running.http) as anyone:
        refused = await anyone.get("/api/runs/task-7f3a/diagram")
        assert refused.status_code == 401 and error_of(refused) == "unauthorized"
        wrong = await anyone.get("/api/runs/task-7f3a/diagram", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401


async def test_unknown_malformed_unrendered_and_vanished_pictures(
    running: System, bus: Bus, http: httpx.AsyncClient
) -> None:
    reply = await http.get("/api/runs/never-drawn/diagram")
    assert reply.status_code == 404 and error_of(reply) == "not_found"
    # An answer that is no SVG keeps the app's own policy (the SVG one is for pictures only).
    assert "frame-ancestors 'none'" in reply.headers["content-security-policy"]
    for bad in ("a%20b", "x" * 65, "-leading-dash", "a.b", "%2E%2E"):
        reply = await http.get(f"/api/runs/{bad}/diagram")
        assert reply.status_code in (400, 404), (bad, reply.status_code)
        assert error_of(reply) in ("bad_request", "not_found"), bad
    assert (await http.get("/api/runs/a.b/diagram")).status_code == 400

    # Rendering failed: the D2 is kept, the picture is not there, and the error says why.
    failed = await draw_run("task-failed", "task", task_run().events, running.runtime, timeout=0)
    assert failed.svg_path is None
    await record(bus, failed)
    reply = await http.get("/api/runs/task-failed/diagram")
    assert reply.status_code == 404 and error_of(reply) == "not_rendered"
    assert "did not finish" in reply.json()["detail"]

    # Drawn, then its file removed (a data reset of the folder): 404, not a crash.
    gone = await draw_run("task-gone", "task", task_run().events, running.runtime)
    await record(bus, gone)
    assert (await http.get("/api/runs/task-gone/diagram")).status_code == 200
    (running.runtime / str(gone.svg_path)).unlink()
    reply = await http.get("/api/runs/task-gone/diagram")
    assert reply.status_code == 404 and error_of(reply) == "not_found"


async def test_a_picture_outside_the_folder_or_holding_a_script_is_never_sent(
    running: System, bus: Bus, http: httpx.AsyncClient, tmp_path: Path
) -> None:
    # A link out of the thoughtflow folder (to the ledger's database, say).
    secret = tmp_path / "secret.svg"
    secret.write_bytes(b'<svg xmlns="http://www.w3.org/2000/svg"><text>private</text></svg>')
    linked = await draw_run("task-linked", "task", task_run().events, running.runtime)
    svg = running.runtime / str(linked.svg_path)
    svg.unlink()
    os.symlink(secret, svg)
    await record(bus, linked)
    reply = await http.get("/api/runs/task-linked/diagram")
    assert reply.status_code == 500 and error_of(reply) == "unsafe_picture" and b"private" not in reply.content

    # A file that holds a script (written by anything but the sanitizer).
    scripted = await draw_run("task-scripted", "task", task_run().events, running.runtime)
    path = running.runtime / str(scripted.svg_path)
    path.write_bytes(path.read_bytes().replace(b"</svg></svg>", b"<script>alert(1)</script></svg></svg>"))
    await record(bus, scripted)
    reply = await http.get("/api/runs/task-scripted/diagram")
    assert reply.status_code == 500 and error_of(reply) == "unsafe_picture" and b"alert" not in reply.content


async def test_503_while_the_ledger_does_not_answer(running: System, http: httpx.AsyncClient) -> None:
    running.procs["ledger"].stop()  # the module's last test: nothing after it needs the ledger
    reply = await http.get("/api/runs/task-7f3a/diagram")
    assert reply.status_code == 503 and error_of(reply) == "ledger_unavailable"
