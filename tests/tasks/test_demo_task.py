"""The offline demo's task (issue #31 item 6): with no OpenAI key, a background task opens its
start page through the real browser tool when the owner allows the host, and finishes with what
the page said; a host the owner did not allow is refused by the egress policy and the answer
says how to allow it. Real gateway, ledger, tasks service and Chromium; the stand-in answers
as the offline demo (the key `make run` gives the services without one)."""

from collections.abc import Iterator

import httpx
import pytest

from delegate.runtime.bus import Bus
from tests.support.standin import StandinProcess
from tests.support.system import System, module_system

from .helpers import create, ended_journal, steps, wait_state
from .site import TestSite

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
            module_standin: StandinProcess, site: TestSite) -> Iterator[System]:
    env = {
        "OPENAI_API_KEY": "offline-standin", "OPENAI_BASE_URL": module_standin.base_url,
        "TASKS_ALLOWED_HOSTS": f"127.0.0.1:{site.port}", "TASKS_ALLOW_PUBLIC": "false",
        "TASKS_PAGE_TIMEOUT_S": "10",
    }
    with module_system(tmp_path_factory.mktemp("demo-task"), request, "ledger", "tasks", "gateway",
                       env=env) as system:
        yield system


async def test_the_demo_task_browses_an_allowed_page_and_reports_it(
        http: httpx.AsyncClient, bus: Bus, site: TestSite) -> None:
    task = await create(http, "What does page A say?", [site.url("/a")])
    done = await wait_state(http, task["id"], "done", "failed")
    assert done["state"] == "done", done
    [opened] = [d for d in steps(await ended_journal(bus, task["id"])) if d.get("name") == "browser_open"]
    assert opened["ok"] is True
    assert site.hits["/a"] >= 1  # the real browser fetched it
    assert "**Page A**" in done["answer"] and "Apples are red." in done["answer"]


async def test_the_demo_task_says_how_to_allow_a_refused_host(http: httpx.AsyncClient, site: TestSite) -> None:
    task = await create(http, "Read the internal page", [site.private_url("/secret")])
    done = await wait_state(http, task["id"], "done", "failed")
    assert done["state"] == "done", done
    assert "egress policy refused it" in done["answer"] and "TASKS_ALLOWED_HOSTS" in done["answer"]
    assert site.private_hits["/secret"] == 0
