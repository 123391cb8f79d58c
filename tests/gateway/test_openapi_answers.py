"""The gateway's success answers, against the shapes its OpenAPI document declares for them
(``openapi_answers``), on a real ledger and memory service: what the CI fuzzer's response-schema
check holds every answer to."""

from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
from jsonschema import Draft202012Validator

from tests.support.standin import StandinProcess
from tests.support.system import System, module_system, owner_http
from tests.support.waiting import eventually

pytestmark = [pytest.mark.integration]

LINES = (
    b'{"ts": "2023-05-08T13:00:00+00:00", "role": "user", "text": "the harbour crane was painted teal"}\n'
    b'{"ts": "2023-05-08T13:01:00+00:00", "role": "assistant", "text": "teal suits a crane"}\n'
)


@pytest.fixture(scope="module")
def running(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest, module_standin: StandinProcess
) -> Iterator[System]:
    env = {
        "OPENAI_API_KEY": "offline-standin",
        "OPENAI_BASE_URL": module_standin.base_url,
        "MEMORY_RESYNC_SECONDS": "1",
    }
    root = tmp_path_factory.mktemp("openapi-answers")
    with module_system(
        root, request, "ledger", "memory", "gateway", env=env, extra_log=module_standin.log_text
    ) as system:
        yield system


@pytest.fixture
async def http(running: System) -> AsyncIterator[httpx.AsyncClient]:
    async with owner_http(running, timeout=60) as client:
        yield client


def declared(doc: dict[str, Any], method: str, path: str, status: str) -> Draft202012Validator:
    schema = doc["paths"][path][method]["responses"][status]["content"]["application/json"]["schema"]
    # $refs point into the document's components: validate from a root that holds them.
    return Draft202012Validator({**schema, "components": doc["components"]})


async def test_every_declared_answer_is_what_the_route_sends(http: httpx.AsyncClient) -> None:
    doc = (await http.get("/api/openapi.json")).json()
    started = await http.post("/api/import", content=LINES, headers={"Content-Type": "application/x-ndjson"})
    assert started.status_code == 202, started.text
    declared(doc, "post", "/api/import", "202").validate(started.json())
    import_id = started.json()["import_id"]

    async def done() -> dict[str, Any] | None:
        body: dict[str, Any] = (await http.get(f"/api/import/{import_id}")).json()
        return body if body["status"] == "done" else None

    declared(doc, "get", "/api/import/{import_id}", "200").validate(await eventually(done, "the import", 60))

    checked: dict[str, dict[str, str | int]] = {
        "/api/timeline": {"limit": 50},
        "/api/memory/search": {"q": "teal crane"},
        "/api/memories": {},
        "/api/people": {},
        "/api/commitments": {},
        "/api/usage/calls": {"span_id": "no-such-run"},
    }
    for path, params in checked.items():
        reply = await http.get(path, params=params)
        assert reply.status_code == 200, (path, reply.text)
        declared(doc, "get", path, "200").validate(reply.json())
    search = (await http.get("/api/memory/search", params={"q": "teal crane"})).json()
    assert search["results"], search  # the items' own schema was applied to something
    # A shape that says something: an answer without its keys does not pass.
    assert not declared(doc, "get", "/api/memory/search", "200").is_valid({"hits": []})
