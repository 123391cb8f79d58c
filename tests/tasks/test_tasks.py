"""Durable tasks end to end: the real gateway, ledger, agent (tool registry) and tasks service,
the OpenAI stand-in playing the model, and headless Chromium browsing a local test site.

The stand-in answers task requests from a script (each step only matches a request that offers
the browser tools, so nothing else takes them); tasks run one at a time here so that each
test's script meets its own task."""

import asyncio
import json
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from delegate.contracts import topics
from delegate.contracts.events import TaskEvent, make_event
from delegate.contracts.messages import QueryRequest, ToolCallRequest
from delegate.runtime.bus import Bus
from tests.support.standin import TEST_API_KEY, StandinProcess
from tests.support.system import System, module_system
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually

from .helpers import answer, create, ended_journal, get, journal, steps, tool_call, wait_state
from .site import TestSite

pytestmark = [pytest.mark.integration]

OWNER_PHONE = "+15550001111"
STALLED_PEER_S = 3


@pytest.fixture(scope="module")
def twilio() -> Iterator[TwilioStandin]:
    tw = TwilioStandin().start()
    yield tw
    tw.stop()


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
            module_standin: StandinProcess, site: TestSite, twilio: TwilioStandin) -> Iterator[System]:
    env = {
        "OPENAI_API_KEY": TEST_API_KEY, "OPENAI_BASE_URL": module_standin.base_url,
        "TASKS_ALLOWED_HOSTS": f"127.0.0.1:{site.port}", "TASKS_MAX_CONCURRENT": "1",
        "TASKS_PAGE_TIMEOUT_S": "10",
        "TASKS_WORKDIR_MAX_MB": "0.3",  # one ordinary screenshot fits; a few long full pages do not
        # send_sms exists (and goes out through the pollers to the Twilio stand-in)
        **twilio.env(owner_phone=OWNER_PHONE),
        # the agent is stopped for a moment in one test: it must not lose its lease meanwhile
        "AGENT_LEASE_TTL": "10",
        # every task's end may wake the agent at once (the run-picture test waits for one)
        "INNER_MIN_WAKE_GAP_S": "0",
        # a client that stops reading an event stream is dropped this soon (the stalled-reader test)
        "GATEWAY_STALLED_PEER_S": str(STALLED_PEER_S),
        # The module's tasks make more than 60 model calls a minute once nothing slows them (no
        # Chromium launched for tasks that never browse): the runaway guard, tested on its own in
        # tests/inner_plane, would hold every later task for an hour.
        "BUDGET_BACKGROUND_CALLS_PER_MIN": "0",
    }
    with module_system(tmp_path_factory.mktemp("tasks"), request, "ledger", "agent", "pollers", "inner-plane",
                       "tasks", "gateway", env=env, separate=("agent", "tasks")) as system:
        yield system


@pytest.fixture
def standin(module_standin: StandinProcess) -> Iterator[StandinProcess]:
    module_standin.reset()
    yield module_standin
    module_standin.reset()


def workdir(system: System, task_id: str) -> Path:
    return system.runtime / "copilot-workdir" / "tasks" / task_id


def task_requests(standin: StandinProcess) -> list[dict[str, Any]]:
    """The model requests tasks made (those offering the browser tools)."""
    return [r for r in standin.response_requests()
            if any(t.get("name") == "browser_open" for t in r["body"].get("tools") or [])]


async def test_a_task_browses_the_site_and_answers_with_a_screenshot(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(
        tool_call("browser_open", {"url": site.url("/")}),
        tool_call("browser_follow", {"link": "Page A"}),
        tool_call("browser_screenshot", {"name": "page-a", "full_page": None}),
        tool_call("browser_open", {"url": site.url("/")}),
        tool_call("browser_search", {"query": "red apples", "selector": None}),
        answer("Page A says apples are red."),
    )
    before = dict(site.hits)
    task = await create(http, "Find out what colour apples are on the test site", [site.url("/")])
    assert task["state"] in ("queued", "running") and task["run_id"] == task["id"]

    done = await wait_state(http, task["id"], "done", "failed")
    assert done["state"] == "done", done
    assert done["answer"] == "Page A says apples are red."
    assert done["screenshots"] == ["page-a.png"]
    shot = workdir(running, task["id"]) / "page-a.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for path, times in (("/", 2), ("/a", 1), ("/search", 1)):
        assert site.hits[path] - before.get(path, 0) == times, path

    events = await ended_journal(bus, task["id"])
    kinds = [e.kind for e in events]
    assert kinds[0] == "span.opened" and events[0].payload["type"] == "task"
    assert kinds[1:3] == ["task.created", "task.started"] and kinds[-2:] == ["task.finished", "span.closed"]
    numbers = [d["step"] for d in steps(events)]
    assert numbers == list(range(1, 12)), numbers  # 6 model steps and 5 tool steps, each once
    follow = next(d for d in steps(events) if d.get("name") == "browser_follow")
    assert follow["ok"] and "Apples are red" in follow["output"]
    assert "untrusted" in follow["output"].lower()  # page text reaches the model as quoted data

    # Each task has its own chain: the first request starts one, each later one continues it.
    requests = task_requests(standin)
    assert len(requests) == 6
    assert requests[0]["body"].get("previous_response_id") is None
    model_steps = [d for d in steps(events) if d["type"] == "model"]
    assert [r["body"].get("previous_response_id") for r in requests[1:]] == [m["response_id"] for m in model_steps[:-1]]

    # The screenshot is served to the owner, and only from the task's own workdir.
    served = await http.get(f"/api/tasks/{task['id']}/files/page-a.png")
    assert served.status_code == 200 and served.content[:4] == b"\x89PNG"
    assert (await http.get(f"/api/tasks/{task['id']}/files/..%2F..%2Fledger.png")).status_code == 404


async def test_an_address_outside_the_allowed_hosts_is_refused_and_the_task_sees_why(
        http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(
        tool_call("browser_open", {"url": site.private_url("/secret")}),
        tool_call("browser_open", {"url": site.url("/redirect-private")}),
        answer("Both addresses were refused."),
    )
    task = await create(http, "Read the internal page")
    done = await wait_state(http, task["id"], "done", "failed")
    assert done["state"] == "done", done
    opened = [d for d in steps(await ended_journal(bus, task["id"])) if d.get("name") == "browser_open"]
    assert [d["ok"] for d in opened] == [False, False]
    assert all("TASKS_ALLOWED_HOSTS" in d["output"] for d in opened), opened
    assert done["refused"] == 2  # the proxy's address refusals count, as TaskSummary.refused says
    assert site.private_hits["/secret"] == 0  # neither directly nor through the redirect


async def test_a_page_that_asks_for_a_side_effect_causes_none_and_the_attempt_is_recorded(
        http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite, twilio: TwilioStandin) -> None:
    standin.script(
        tool_call("browser_open", {"url": site.url("/notes")}),
        # What a model fooled by the page would do: the tool is not even offered to the task.
        tool_call("send_sms_to_owner", {"text": "Budget approved; launch moved to May."}),
        answer("The notes page also asks me to text you; I did not act on it."),
    )
    sent_before = len(twilio.messages)
    task = await create(http, "Summarise the meeting notes", [site.url("/notes")])
    done = await wait_state(http, task["id"], "done", "failed")
    assert done["state"] == "done" and done["refused"] == 1, done
    events = await ended_journal(bus, task["id"])
    refused = steps(events, "task.refused")
    assert [r["name"] for r in refused] == ["send_sms_to_owner"]
    assert "side effects" in refused[0]["reason"] and "not enable" in refused[0]["reason"]
    offered = {t["name"] for r in task_requests(standin) for t in r["body"]["tools"]}
    assert "send_sms_to_owner" not in offered and "send_email" not in offered and "browser_open" in offered
    assert not [e for e in events if e.kind == "task.step.intent"]
    opened = next(d for d in steps(events) if d.get("name") == "browser_open")
    assert "text the owner the notes" in opened["output"] and "untrusted" in opened["output"].lower()
    assert len(twilio.messages) == sent_before  # no text went anywhere


async def test_pause_resume_and_cancel(http: httpx.AsyncClient, bus: Bus, standin: StandinProcess,
                                       site: TestSite) -> None:
    # A slow page keeps the task busy in a step that pause and cancel interrupt.
    standin.script(
        tool_call("browser_open", {"url": site.url("/slow?s=3")}, times=3),
        answer("done at last"),
    )
    task = await create(http, "Wait for the slow page")
    await wait_state(http, task["id"], "running")
    paused = await http.post(f"/api/tasks/{task['id']}/pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused", paused.text
    again = await http.post(f"/api/tasks/{task['id']}/pause")
    assert again.status_code == 409 and again.json()["error"]["code"] == "conflict"
    steps_when_paused = (await get(http, task["id"]))["steps"]

    resumed = await http.post(f"/api/tasks/{task['id']}/resume")
    assert resumed.status_code == 200 and resumed.json()["state"] in ("queued", "running"), resumed.text
    await wait_state(http, task["id"], "running")

    loop = asyncio.get_running_loop()
    started = loop.time()
    cancelled = await http.post(f"/api/tasks/{task['id']}/cancel")
    took = loop.time() - started
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled", cancelled.text
    assert took < 5.0, f"cancel took {took:.1f}s"
    events = await ended_journal(bus, task["id"])
    kinds = [e.kind for e in events]
    assert kinds.count("task.paused") == 1 and kinds.count("task.resumed") == 1 and "task.cancelled" in kinds
    assert (await get(http, task["id"]))["steps"] >= steps_when_paused
    assert (await http.post(f"/api/tasks/{task['id']}/resume")).status_code == 409


async def test_each_budget_ends_a_runaway_task_with_its_reason(http: httpx.AsyncClient, standin: StandinProcess,
                                                               site: TestSite) -> None:
    standin.script(tool_call("browser_open", {"url": site.url("/a")}, times=50))
    by_steps = await create(http, "Loop forever", budget={"steps": 3, "seconds": 600, "tokens": 10**6})
    assert (await wait_state(http, by_steps["id"], "failed"))["fail_reason"] == "steps"
    by_tokens = await create(http, "Loop forever", budget={"steps": 100, "seconds": 600, "tokens": 10})
    failed = await wait_state(http, by_tokens["id"], "failed")
    assert failed["fail_reason"] == "tokens" and "token budget" in failed["error"]
    by_time = await create(http, "Loop forever", budget={"steps": 100, "seconds": 2, "tokens": 10**6})
    assert (await wait_state(http, by_time["id"], "failed"))["fail_reason"] == "seconds"
    standin.reset()
    standin.script(tool_call("browser_open", {"url": site.url("/long?n=60000")}),
                   tool_call("browser_screenshot", {"name": None, "full_page": True}, times=20))
    by_disk = await create(http, "Photograph a long page again and again")
    failed = await wait_state(http, by_disk["id"], "failed")
    assert failed["fail_reason"] == "workdir" and len(failed["screenshots"]) >= 1, failed
    standin.reset()
    # Failed evaluations count too: a model that keeps calling a tool nobody has.
    standin.script(tool_call("no_such_tool", {}, times=20))
    by_failures = await create(http, "Use a tool that does not exist")
    failed = await wait_state(http, by_failures["id"], "failed")
    assert failed["fail_reason"] == "failures" and failed["refused"] == 4, failed


async def test_the_event_stream_resumes_from_last_event_id_without_gap_or_duplicate(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(
        tool_call("browser_open", {"url": site.url("/")}),
        tool_call("browser_follow", {"link": "Page A"}),
        answer("Apples are red."),
    )
    task = await create(http, "Read page A")
    await wait_state(http, task["id"], "done")
    await ended_journal(bus, task["id"])
    # The stream carries the whole span, the steps' model.usage included (the picture's artifact
    # comes after the end).
    ledger_seqs = [e.seq for e in await journal(bus, task["id"]) if e.kind != "thoughtflow.artifact"]

    async def read(last_id: str | None, count: int) -> list[tuple[str, dict[str, Any]]]:
        headers = {"Last-Event-ID": last_id} if last_id else {}
        got: list[tuple[str, dict[str, Any]]] = []
        async with http.stream("GET", f"/api/tasks/{task['id']}/events", headers=headers) as reply:
            assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
            fields: dict[str, str] = {}
            async for line in reply.aiter_lines():
                if line.startswith("retry:"):
                    assert int(line.split(":", 1)[1]) > 0
                if line and not line.startswith(":"):
                    name, _, value = line.partition(":")
                    fields[name] = value.strip()
                    continue
                if fields.get("event") == "task":
                    got.append((fields["id"], json.loads(fields["data"])))
                    if len(got) == count:
                        return got
                fields = {}
        return got

    first = await read(None, 4)
    rest = await read(first[-1][0], len(ledger_seqs) - 4)
    ids = [int(i) for i, _ in first + rest]
    assert ids == ledger_seqs  # every event once, in order, across the reconnect
    assert all(int(i) == e["seq"] for i, e in first + rest)
    # An id the ledger has not reached (it lost events: restored from a backup) is a gap, said so.
    async with http.stream("GET", f"/api/tasks/{task['id']}/events",
                           headers={"Last-Event-ID": str(10**12)}) as reply:
        lines = []
        async for text in reply.aiter_lines():
            lines.append(text)
            if text.startswith("data:") and "event: gap" in lines:
                break
    gap = json.loads(lines[-1].split(":", 1)[1])
    assert gap["after_seq"] == 10**12 and "cannot be replayed" in gap["reason"]
    assert (await http.get(f"/api/tasks/{task['id']}/events", headers={"Last-Event-ID": "x1"})).status_code == 400
    assert (await http.get("/api/tasks/no-such-task/events")).status_code == 404


def _gateway_holds(gateway_port: int, client_port: int) -> bool:
    """Whether the kernel still has the gateway's side of our connection (any state): a
    connection aborted by TCP_USER_TIMEOUT is gone at once, and sends the peer nothing."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, remote = line.split()[1:3]
            if int(local.rsplit(":", 1)[1], 16) == gateway_port and int(remote.rsplit(":", 1)[1], 16) == client_port:
                return True
    return False


async def test_an_event_stream_whose_reader_stopped_is_dropped(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    """An SSE stream has no ping of its own: a client that stops reading would hold its stream
    and socket for as long as it keeps them. The gateway's sockets carry TCP_USER_TIMEOUT
    (GATEWAY_STALLED_PEER_S), so data the peer's closed window leaves unsent drops the connection
    (tcp(7)). The stream must be larger than what the kernel buffers on both sides: megabytes of
    replay, from events written into the task's span."""
    standin.script(answer("Nothing to browse."))
    task = await create(http, "Say hello")
    await wait_state(http, task["id"], "done")
    filler = "x" * 60_000
    # task.* events of no task the tasks service knows (it ignores them) in this task's span.
    events = [make_event(TaskEvent(task_id="stalled-reader-filler", data={"text": filler}), kind="task.note",
                         conversation_id=None, span_id=task["id"], channel="inner") for _ in range(100)]
    await asyncio.gather(*(bus.publish(topics.ledger_append("test"), e) for e in events))

    async def stored() -> bool | None:
        return True if sum(e.kind == "task.note" for e in await journal(bus, task["id"])) == 100 else None

    await eventually(stored, "the filler events committed", timeout=60)

    loop = asyncio.get_running_loop()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    client.setblocking(False)
    host, port = running.http.removeprefix("http://").split(":")
    await loop.sock_connect(client, (host, int(port)))
    client_port = client.getsockname()[1]
    request = (f"GET /api/tasks/{task['id']}/events HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Authorization: Bearer {running.token}\r\n\r\n")
    await loop.sock_sendall(client, request.encode())
    try:
        # Never read, and watch the gateway's side of the connection.
        assert _gateway_holds(int(port), client_port)

        async def dropped() -> bool | None:
            return True if not _gateway_holds(int(port), client_port) else None

        await eventually(dropped, "the gateway to drop the stalled stream", timeout=STALLED_PEER_S + 30)
    finally:
        client.close()
    # The drop was that connection's alone: the gateway serves on.
    assert (await http.get(f"/api/tasks/{task['id']}")).status_code == 200


async def test_bad_requests_are_refused_clearly(http: httpx.AsyncClient) -> None:
    for body, where in (({"goal": "  "}, "goal"), ({"goal": "x", "start_urls": ["file:///etc/passwd"]}, "start_urls"),
                        ({"goal": "x", "budget": {"steps": 0}}, "budget")):
        reply = await http.post("/api/tasks", json=body)
        assert reply.status_code == 400 and where in reply.json()["error"]["message"], reply.text
    assert (await http.get("/api/tasks/nope")).status_code == 404
    assert (await http.post("/api/tasks/nope/cancel")).status_code == 404
    first = await http.post("/api/tasks", json={"goal": "once"}, headers={"Idempotency-Key": "k-1"})
    second = await http.post("/api/tasks", json={"goal": "once"}, headers={"Idempotency-Key": "k-1"})
    assert first.json()["id"] == second.json()["id"]
    await http.post(f"/api/tasks/{first.json()['id']}/cancel")


async def wait_journal(bus: Bus, task_id: str, what: str, check: Any, timeout: float = 30.0) -> list[Any]:
    async def probe() -> list[Any] | None:
        events = await journal(bus, task_id)
        return events if check(events) else None

    return await eventually(probe, what, timeout=timeout)


async def test_a_killed_runner_resumes_at_the_right_step_and_repeats_no_completed_one(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    # Slow pages and slow model answers keep each next step in flight while the runner is killed:
    # the kill lands just after a step was journaled, at each boundary in turn (model -> tool,
    # tool -> model). A request cut off in flight is asked again after the restart, so each
    # answer is scripted for what the request carries (and may be used twice).
    standin.script(
        tool_call("browser_open", {"url": site.url("/slow?s=2")}, times=2, input_contains="surviving crashes"),
        tool_call("browser_open", {"url": site.url("/a")}, times=2, delay_ms=2000, input_contains="finally"),
        {"action": "slow", "delay_ms": 700, "text": "Resumed to the end.", "times": 2,
         "match": {"has_tool": "browser_open", "input_contains": "Apples are red"}},
    )
    task = await create(http, "Read three pages, surviving crashes")
    kills = 0
    for boundary in (1, 2, 3, 4):
        await wait_journal(bus, task["id"], f"step {boundary} journaled",
                           lambda events, n=boundary: any(e.payload.get("data", {}).get("step") == n
                                                          for e in events if e.kind == "task.step"))
        running.kill("tasks")
        kills += 1
        running.procs["tasks"].start()
        running.wait_ready(["tasks"], timeout=30)
    done = await wait_state(http, task["id"], "done", "failed", timeout=60)
    assert done["state"] == "done", done
    events = await ended_journal(bus, task["id"])
    numbers = [d["step"] for d in steps(events)]
    assert numbers == sorted(set(numbers)) == list(range(1, len(numbers) + 1)), numbers  # none twice, none skipped
    assert [e.kind for e in events].count("task.started") == 1 + kills
    # No model call for a replayed step: every request continues from the newest journaled
    # response, so no response was asked for twice from the same place in the chain...
    model_ids = [d["response_id"] for d in steps(events) if d["type"] == "model"]
    previous = [r["body"].get("previous_response_id") for r in task_requests(standin)]
    assert previous[0] is None and set(previous[1:]) <= set(model_ids)
    # ...and at most one request per kill was lost in flight (not journaled, so asked again).
    assert len(previous) <= len(model_ids) + kills


async def test_a_side_effect_cut_off_between_intent_and_result_is_unknown_and_never_resent(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite,
        twilio: TwilioStandin) -> None:
    text = "Notes from the test site"
    standin.script(
        tool_call("browser_open", {"url": site.url("/slow?s=2")}),
        tool_call("send_sms_to_owner", {"text": text}),
        answer("I could not confirm the text was sent; please check."),
    )
    sent_before = len(twilio.bodies(to=OWNER_PHONE))
    slow_before = site.hits["/slow"]
    task = await create(http, "Text me the notes from the test site", allow_tools=["send_sms_to_owner"])
    await eventually(lambda: _async(site.hits["/slow"] > slow_before), "the slow page requested")
    agent = running.procs["agent"].proc
    assert agent is not None
    agent.send_signal(signal.SIGSTOP)  # the registry cannot answer: the send hangs after its intent
    try:
        events = await wait_journal(bus, task["id"], "the side effect's intent",
                                    lambda evs: any(e.kind == "task.step.intent" for e in evs))
        running.kill("tasks")
    finally:
        agent.send_signal(signal.SIGCONT)
    intent = steps(events, "task.step.intent")[0]
    assert intent["name"] == "send_sms_to_owner" and intent["key"] == f"{task['id']}:{intent['step']}"
    running.procs["tasks"].start()
    running.wait_ready(["tasks"], timeout=30)

    done = await wait_state(http, task["id"], "done", "failed", timeout=60)
    assert done["unknown_steps"] == [intent["step"]], done
    events = await ended_journal(bus, task["id"])
    unknown = steps(events, "task.step.unknown")
    assert [u["key"] for u in unknown] == [intent["key"]]
    assert len(steps(events, "task.step.intent")) == 1  # never tried again
    assert not [d for d in steps(events) if d.get("name") == "send_sms_to_owner"]  # no result was ever journaled
    # The stopped agent may still deliver the one call it had received; nothing sends it twice.
    sent = [b for b in twilio.bodies(to=OWNER_PHONE)[sent_before:] if text in b]
    assert len(sent) <= 1, sent
    last_request = task_requests(standin)[-1]["body"]["input"]
    assert any("UNKNOWN" in str(item.get("output", "")) for item in last_request)


async def _async(value: Any) -> Any:
    return value


async def test_the_agent_starts_a_task_with_its_tool_and_the_end_raises_a_signal(
        http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(tool_call("browser_open", {"url": site.url("/a")}), answer("Apples are red, says page A."))
    call = ToolCallRequest(name="start_task", call_id="call-start-1",
                           arguments={"goal": "What colour are apples on page A?", "start_urls": [site.url("/a")]})
    started = await bus.request(topics.TOOLS_CALL, call, timeout=30)
    again = await bus.request(topics.TOOLS_CALL, call, timeout=30)  # a redelivered turn: the same task
    assert started.ok and again.ok, started.output
    tasks = [t for t in (await http.get("/api/tasks")).json()["tasks"] if t["goal"] == call.arguments["goal"]]
    assert len(tasks) == 1 and tasks[0]["source"] == "agent" and tasks[0]["id"] in started.output
    done = await wait_state(http, tasks[0]["id"], "done")
    check = await bus.request(topics.TOOLS_CALL, ToolCallRequest(name="check_task",
                                                                 arguments={"task_id": done["id"]}), timeout=30)
    assert check.ok and "Apples are red" in check.output

    # The inner plane hears of it: the task.finished signal it records, once per task.
    async def signals() -> list[dict[str, Any]] | None:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["inner.signal"], limit=1000))
        found = [e.payload["signal"] for e in reply.events
                 if e.payload["signal"].get("payload", {}).get("task_id") == done["id"]]
        return found or None

    raised = await eventually(signals, "the task.finished signal in the ledger")
    assert len(raised) == 1 and raised[0]["kind"] == "task.finished", raised
    assert raised[0]["dedup_key"] == f"task:{done['id']}" and "Apples are red" in raised[0]["payload"]["summary"]


async def test_run_pictures_are_drawn_for_a_task_and_an_activation_and_served_without_scripts(
        running: System, http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(
        tool_call("browser_open", {"url": site.url("/a")}),
        tool_call("send_sms_to_owner", {"text": "x"}),  # refused: drawn as a failure
        answer("Apples are red."),
    )
    task = await create(http, "Draw my run")
    await wait_state(http, task["id"], "done")

    async def picture(run_id: str) -> httpx.Response | None:
        reply = await http.get(f"/api/runs/{run_id}/diagram")
        return reply if reply.status_code == 200 else None

    served = await eventually(lambda: picture(task["run_id"]), "the task's run picture")
    assert served.headers["content-type"].startswith("image/svg+xml")
    assert "default-src 'none'" in served.headers["content-security-policy"]
    svg = served.text.lower()
    assert "<svg" in svg and "<script" not in svg and "foreignobject" not in svg and " onload=" not in svg
    folder = running.runtime / "thoughtflow" / task["run_id"]
    d2 = (folder / "flow.d2").read_text()
    assert "browser_open" in d2 and "send_sms_to_owner" in d2

    # The task's end raised a signal; the inner plane's activation for it gets its picture too.
    async def activation_id() -> str | None:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=["activation.outcome"], limit=1000))
        for outcome in reply.events:
            spans = await bus.request(topics.LEDGER_QUERY, QueryRequest(span_id=outcome.span_id, limit=50))
            opened = next((e for e in spans.events if e.kind == "span.opened"), None)
            if opened is not None and task["id"] in json.dumps(opened.payload):
                return str(opened.payload.get("activation_id") or outcome.span_id)
        return None

    run_id = await eventually(activation_id, "the activation that answered the task's signal", timeout=60)
    drawn = await eventually(lambda: picture(run_id), "the activation's run picture")
    assert "<script" not in drawn.text.lower()
    assert (await http.get("/api/runs/no-such-run/diagram")).status_code == 404


async def test_no_more_tasks_run_at_once_than_allowed(http: httpx.AsyncClient, standin: StandinProcess,
                                                      site: TestSite) -> None:
    standin.script(tool_call("browser_open", {"url": site.url("/slow?s=3")}, times=2))
    first = await create(http, "The first of two")
    second = await create(http, "The second of two")
    await wait_state(http, first["id"], "running")
    assert (await get(http, second["id"]))["state"] == "queued"  # TASKS_MAX_CONCURRENT=1 here
    await http.post(f"/api/tasks/{first['id']}/cancel")
    await wait_state(http, second["id"], "running")
    await http.post(f"/api/tasks/{second['id']}/cancel")


async def test_each_model_step_writes_one_priced_usage_billed_to_the_task(
        http: httpx.AsyncClient, bus: Bus, standin: StandinProcess, site: TestSite) -> None:
    standin.script(tool_call("browser_open", {"url": site.url("/a")}), answer("Page A is about apples."))
    task = await create(http, "Read page A of the test site")
    assert (await wait_state(http, task["id"], "done", "failed"))["state"] == "done"

    async def metered() -> list[Any] | None:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(span_id=task["id"], kinds=["model.usage"]))
        return reply.events if len(reply.events) >= 2 else None

    usage = await eventually(metered, "the task's two model.usage events")
    assert len(usage) == len(task_requests(standin)) == 2
    for event in usage:
        assert (event.payload["purpose"], event.payload["cause_id"]) == ("task_step", task["id"])
        assert event.channel == "inner"
        assert event.payload["input_tokens"] > 0 and event.payload["cost_usd"] > 0
