"""``GET /api/openapi.json``: the owner's, and true to the routes (what the CI fuzzer reads)."""

from typing import Any

import httpx
from fastapi.routing import APIRoute

from delegate.contracts.events import RUN_ID_PATTERN

from .helpers import PATIENT_S, Gateway, auth


def api_routes(routes: list[Any]) -> list[APIRoute]:
    """Every HTTP route, through the routers included (FastAPI keeps them nested)."""
    found: list[APIRoute] = []
    for route in routes:
        if isinstance(route, APIRoute):
            found.append(route)
        elif hasattr(route, "original_router"):
            found += api_routes(route.original_router.routes)
    return found


async def test_the_document_is_the_owners_and_names_every_route_its_bodies_and_errors(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http) as http:
        refused = await http.get("/api/openapi.json")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        doc = (await http.get("/api/openapi.json", headers=auth())).json()

    app = gateway.server.config.loaded_app
    while not hasattr(app, "state"):  # uvicorn wraps the app in middleware
        app = app.app
    routes = {(m.lower(), r.path) for r in api_routes(app.routes) if r.include_in_schema for m in r.methods or ()}
    documented = {(m, p) for p, ops in doc["paths"].items() for m in ops}
    assert routes == documented

    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            # every refusal is the gateway's error JSON (400, not FastAPI's 422 shape)
            assert op["responses"]["default"]["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/Error"}, (method, path)
            assert "422" not in op["responses"]
            assert ("security" in op) == (path.startswith("/api/") and path != "/api/session"), (method, path)
    bodies = {(m, p): op["requestBody"]["content"] for p, ops in doc["paths"].items() for m, op in ops.items()
              if "requestBody" in op}
    assert set(bodies["post", "/api/tasks"]["application/json"]["schema"]["properties"]) == {
        "goal", "start_urls", "budget", "allow_tools"}  # source and idempotency_key are the gateway's
    assert bodies["post", "/api/signals"]["application/json"]["schema"]["discriminator"]["mapping"].keys() == {
        "script", "task.finished", "task.failed"}
    assert set(bodies["post", "/api/import"]) == {"application/x-ndjson", "application/json"}
    assert {("post", "/api/messages"), ("patch", "/api/memories/{fact_id}"), ("post", "/sms")} <= set(bodies)
    push = bodies["post", "/api/push/subscriptions"]["application/json"]["schema"]
    assert set(push["properties"]) == {"endpoint", "keys", "expirationTime"}
    events = doc["paths"]["/api/tasks/{task_id}/events"]["get"]["responses"]["200"]["content"]
    assert list(events) == ["text/event-stream"]


async def test_query_parameters_are_documented_with_the_bounds_their_handlers_enforce(gateway: Gateway) -> None:
    """FastAPI documented them as any text (the handlers read text to answer with their own error);
    the fuzzer then spent most of its cases on 400s. Each bound said is the one enforced: its edge
    is taken, one past it refused."""
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as http:
        doc = (await http.get("/api/openapi.json")).json()

        def parameter(method: str, path: str, name: str) -> dict[str, Any]:
            matching: list[dict[str, Any]] = [p for p in doc["paths"][path][method]["parameters"] if p["name"] == name]
            [found] = matching
            return found

        limits: tuple[tuple[str, dict[str, str]], ...] = (
            ("/api/timeline", {}), ("/api/memory/search", {"q": "teal"}), ("/api/memories", {})
        )
        for path, base in limits:
            name = "limit"
            schema = parameter("get", path, name)["schema"]
            assert schema["type"] == "integer" and schema["minimum"] == 1, (path, schema)
            for value, taken in ((schema["maximum"], True), (schema["maximum"] + 1, False), (0, False)):
                reply = await http.get(path, params={**base, name: value})
                assert (reply.status_code != 400) == taken, (path, value, reply.text)
        assert parameter("get", "/api/memory/search", "q")["required"] is True
        assert (await http.get("/api/memory/search")).status_code == 400
        assert parameter("get", "/api/usage/calls", "span_id")["required"] is True
        assert (await http.get("/api/usage/calls")).status_code == 400
        for path, name in (("/api/commitments", "state"), ("/api/usage", "group")):
            for value in parameter("get", path, name)["schema"]["enum"]:
                assert (await http.get(path, params={name: value})).status_code != 400, (path, value)
            assert (await http.get(path, params={name: "nonsense"})).status_code == 400
        for path, name in (("/api/memories", "include_retired"), ("/api/reminders", "include_done")):
            assert parameter("get", path, name)["schema"] == {"type": "boolean"}
            for value in ("true", "false"):
                assert (await http.get(path, params={name: value})).status_code != 400, (path, value)


async def test_path_ids_are_documented_as_their_handlers_check_them(gateway: Gateway) -> None:
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as http:
        doc = (await http.get("/api/openapi.json")).json()
        [run_id] = doc["paths"]["/api/runs/{run_id}/diagram"]["get"]["parameters"]
        assert run_id["schema"]["pattern"] == RUN_ID_PATTERN
        assert (await http.get("/api/runs/a.b/diagram")).status_code == 400  # outside the pattern
        assert (await http.get("/api/runs/run-1/diagram")).status_code != 400  # inside it
        for action in ("stop", "regenerate"):
            [turn_id] = doc["paths"][f"/api/turns/{{turn_id}}/{action}"]["post"]["parameters"]
            assert turn_id["schema"]["maxLength"] == 64
            assert (await http.post(f"/api/turns/{'t' * 65}/{action}")).status_code == 400
            assert (await http.post(f"/api/turns/{'t' * 64}/{action}")).status_code != 400


async def test_twilios_status_callbacks_are_documented_as_answered(gateway: Gateway) -> None:
    """Once the fuzzer signed Twilio's forms, it met /call/status answering 204 with no body where
    the document said 200 JSON (it had only ever seen the signature's 403)."""
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=gateway.http, headers=auth()) as http:
        doc = (await http.get("/api/openapi.json")).json()
    for path in ("/call/status", "/call/amd"):
        responses = doc["paths"][path]["post"]["responses"]
        assert "200" not in responses and "content" not in responses["204"], (path, responses)
    assert list(doc["paths"]["/sms/status"]["post"]["responses"]["200"]["content"]) == ["text/xml"]
