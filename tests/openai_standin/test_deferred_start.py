"""The stand-in listens before it builds its app (routes, engine, OpenAI's schemas), and builds
it on the first request: requests that come first wait for that one build and get the answers
they would have got from a built stand-in, the strict refusals included. Both ways it runs: a
process of its own (tests, split ``make run``) and beside the services in a host (offline
``make run``)."""

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from delegate.launcher.procs import free_port, python_module, wait_for_port
from delegate.openai_standin.main import serve
from delegate.openai_standin.settings import Settings
from tests.support.standin import SRC

pytestmark = pytest.mark.integration  # a stand-in's server on a real port

BUILDING = "building the app for its first request"
VALID = {"model": "gpt-5.5", "input": "hello"}
UNKNOWN = {"model": "gpt-5.5", "input": "hello", "foo": 1}


async def first_requests(root: str) -> list[httpx.Response]:
    """Sent together, the moment the server listens: a model request, one the API refuses, and
    the control API's health."""
    headers = {"Authorization": "Bearer sk-standin-test"}
    async with httpx.AsyncClient(base_url=root, headers=headers, timeout=30) as http:
        return list(await asyncio.gather(
            http.post("/v1/responses", json=VALID),
            http.post("/v1/responses", json=UNKNOWN),
            http.get("/_standin/health"),
        ))


def check_answers(answers: list[httpx.Response]) -> None:
    answered, refused, health = answers
    assert answered.status_code == 200, answered.text
    reply: dict[str, Any] = answered.json()
    assert reply["status"] == "completed" and reply["output"], reply
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"] == {
        "message": "Unknown parameter: 'foo'.",
        "type": "invalid_request_error",
        "param": "foo",
        "code": "unknown_parameter",
    }
    assert health.status_code == 200 and health.json() == {"status": "ok"}


async def test_a_stand_in_process_answers_what_comes_before_its_app_is_built(tmp_path: Path) -> None:
    port = free_port()
    env = {
        **os.environ,
        "STANDIN_HOST": "127.0.0.1",
        "STANDIN_PORT": str(port),
        "STANDIN_DEMO_PACE_MS": "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
        "PYTHONUNBUFFERED": "1",
    }
    process = python_module("openai-standin", "delegate.openai_standin", env, tmp_path / "standin.log").start()
    try:
        assert process.proc is not None
        await asyncio.to_thread(wait_for_port, port, 30, process.proc)
        check_answers(await first_requests(f"http://127.0.0.1:{port}"))
        # The first request built it; those that came while it was being built waited for it.
        assert process.log_text().count(BUILDING) == 1, process.log_text()
    finally:
        process.stop(5)


async def test_a_hosted_stand_in_answers_what_comes_before_its_app_is_built(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """``serve``, as a host runs it beside the services, on this test's event loop."""
    port = free_port()
    settings = Settings(standin_host="127.0.0.1", standin_port=port, standin_demo="off")
    stop = asyncio.Event()
    caplog.set_level("INFO", logger="delegate.openai_standin.deferred")
    serving = asyncio.create_task(serve(settings, stop))
    try:
        await asyncio.to_thread(wait_for_port, port, 30)
        assert BUILDING not in caplog.text  # listening, not built: nothing asked for it yet
        check_answers(await first_requests(f"http://127.0.0.1:{port}"))
        assert caplog.text.count(BUILDING) == 1, caplog.text
    finally:
        stop.set()
        await asyncio.wait_for(serving, 10)
