"""Tasks in the browser, against the real ledger, agent, tasks service and gateway, the OpenAI
stand-in playing the model and headless Chromium (the tasks service's own) browsing a local test
site: a task started from the panel streams its steps live (SSE), ends with its answer as text,
shows its screenshot and its run picture, and appears on the timeline as one card; Pause, Resume
and Cancel follow the task's state."""

import re
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Response

from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.tasks.helpers import answer, tool_call
from tests.tasks.site import TestSite

from .chat_page import ChatPage

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]

PANEL_ROW = "#tasks-list li.task-row"
# The goal is the owner's words and the answer comes from web pages: both must stay text.
GOAL = 'Find out what colour apples are <img src=x onerror="window.__pwned=1"> on the <b>test</b> site'
ANSWER = "Page A says apples are <b>red</b> <script>window.__pwned=2</script>"

IMG_LOADED = """sel => { const i = document.querySelector(sel); return !!i && i.complete && i.naturalWidth > 0; }"""
CARD_STATE = """([id, state]) => {
  const card = document.querySelector(`#timeline section.task-card[data-task-id="${id}"]`);
  return !!card && card.dataset.state === state;
}"""
ROW_SELECTED = """id => !!document.querySelector(`#tasks-list li.task-row.selected[data-task-id="${id}"]`)"""
# Elements the task's words would make if they became markup (the panel's own images are the
# screenshots, PNG files, and the run picture).
MARKUP = "#tasks-panel b, #tasks-panel script, #task-detail img:not(.task-picture-img):not([src$='.png'])"


@pytest.fixture
def site() -> Iterator[TestSite]:
    with TestSite() as s:
        yield s


def tasks_env(site: TestSite, browser_path: str) -> dict[str, str]:
    return {
        "TASKS_ALLOWED_HOSTS": f"127.0.0.1:{site.port}",
        "TASKS_MAX_CONCURRENT": "1",
        "TASKS_PAGE_TIMEOUT_S": "10",
        "TASKS_BROWSER_PATH": browser_path,
    }


def api_task(sys_: System, task_id: str) -> dict[str, Any]:
    reply = httpx.get(f"{sys_.http}/api/tasks/{task_id}", headers=sys_.auth(), timeout=10)
    reply.raise_for_status()
    task: dict[str, Any] = reply.json()
    return task


def watch_404s(page: ChatPage) -> list[str]:
    """The URLs answered 404: only the run picture may be (it is drawn just after the task ends)."""
    urls: list[str] = []

    def on_response(response: Response) -> None:
        if response.status == 404:
            urls.append(response.url)

    page.page.on("response", on_response)
    return urls


def assert_clean(page: ChatPage, not_found: list[str]) -> None:
    assert all("/api/runs/" in u and u.endswith("/diagram") for u in not_found), not_found
    # Each of those 404s is also a console line "Failed to load resource: … 404"; nothing else may be.
    page.console_errors = [e for e in page.console_errors if "status of 404" not in e]
    page.assert_clean()


async def start_task(page: ChatPage, goal: str, url: str | None = None, steps: str | None = None) -> str:
    """Fill the panel's form as a person would and press Start task; returns the new task's id."""
    p = page.page
    if not await p.locator("#task-new").evaluate("d => d.open"):
        await p.click("#task-new > summary")
    await p.fill("#task-goal", goal)
    if url:
        await p.fill("#task-urls", url)
    if steps:
        await p.fill("#task-steps", steps)
    before = set(await p.eval_on_selector_all(PANEL_ROW, "ns => ns.map(n => n.dataset.taskId)"))
    await p.click("#task-submit")
    # The new task is listed and selected (its detail shows).
    task_id: str = await page.wait_for(
        """before => { const row = document.querySelector('#tasks-list li.task-row.selected');
                       return row && !before.includes(row.dataset.taskId) ? row.dataset.taskId : null; }""",
        sorted(before),
    )
    await page.wait_for("id => document.getElementById('task-detail').dataset.taskId === id", task_id)
    return task_id


async def wait_row_state(page: ChatPage, task_id: str, *states: str, timeout: int = 60_000) -> str:
    state: str = await page.wait_for(
        """([id, states]) => { const r = document.querySelector(`#tasks-list li[data-task-id="${id}"]`);
                               return r && states.includes(r.dataset.state) ? r.dataset.state : null; }""",
        [task_id, list(states)],
        timeout,
    )
    return state


async def test_a_task_from_the_panel_streams_its_steps_and_shows_its_answer_screenshot_and_run_picture(
    delegate: Callable[..., Awaitable[System]],
    standin: StandinProcess,
    new_page: NewPage,
    site: TestSite,
    headless_shell: str,
) -> None:
    sys_ = await delegate(env=tasks_env(site, headless_shell), extra=("tasks",))
    standin.script(
        tool_call("browser_open", {"url": site.url("/")}),
        tool_call("browser_follow", {"link": "Page A"}),
        tool_call("browser_screenshot", {"name": "page-a", "full_page": None}),
        answer(ANSWER),
    )
    page = await new_page(sys_)
    p = page.page
    not_found = watch_404s(page)

    # The panel: nothing yet, so the form is open; the advanced part warns that pages are untrusted.
    await p.click("#tasks-btn")
    assert await p.locator("#tasks-btn").get_attribute("aria-expanded") == "true"
    await page.wait_for_text("#tasks-status", "No tasks yet")
    assert await p.locator("#task-new").evaluate("d => d.open")
    await p.click("#task-advanced > summary")
    assert "Web pages are untrusted" in await p.locator("#task-tools-warning").inner_text()
    await p.click("#task-advanced > summary")
    task_id = await start_task(page, GOAL, site.url("/"), steps="12")
    detail = p.locator("#task-detail")
    assert await detail.locator(".task-detail-goal").inner_text() == GOAL

    # Its events arrive live, one readable line per step; the answer ends the log, as text.
    opened = f" · browser_open {site.url('/')} · ok · "
    await page.wait_for_text("#task-detail .task-line[data-kind='task.step']", opened)
    text = await detail.locator(".task-line[data-kind='task.step']", has_text=opened).first.inner_text()
    assert re.fullmatch(r"Step \d+ · browser_open \S+ · ok · [\d,]+ ms", text.split("\n")[0]), text
    asked = detail.locator(".task-line[data-kind='task.step']", has_text="model asks for browser_open")
    assert await asked.count() >= 1
    await page.wait_for_text("#task-detail .task-line.final .task-answer", ANSWER)
    assert await detail.locator(".task-line.final .task-line-text").inner_text() == "Finished"
    assert await detail.locator(".task-line[data-kind='task.started']").count() == 1
    await wait_row_state(page, task_id, "done")
    row = p.locator(f"{PANEL_ROW}[data-task-id='{task_id}']")
    assert await row.locator(".task-badge").inner_text() == "Done"
    assert await row.locator(".task-actions").count() == 0, "an ended task has no controls"
    await page.wait_for_text("#task-detail .task-stream-status", "The task has ended.")

    # The screenshot: a thumbnail served by the gateway; a click shows it full size.
    await page.wait_for(IMG_LOADED, "#task-detail .task-shot img")
    thumb = detail.locator(".task-shot img")
    assert await thumb.get_attribute("src") == f"/api/tasks/{task_id}/files/page-a.png"
    await detail.locator(".task-shot-btn").click()
    await page.wait_for("() => document.getElementById('task-shot-dialog').open")
    await page.wait_for(IMG_LOADED, "#task-shot-img")
    await page.screenshot("tasks-screenshot-full")
    await p.keyboard.press("Escape")
    await page.wait_for("() => !document.getElementById('task-shot-dialog').open")

    # The run picture: an <img> of the SVG (never its markup in the page), and a link to a new tab.
    run_id = api_task(sys_, task_id)["run_id"]
    await page.wait_for(IMG_LOADED, "#task-detail .task-picture-img", timeout=120_000)
    picture = detail.locator(".task-picture-img")
    assert await picture.get_attribute("src") == f"/api/runs/{run_id}/diagram"
    link = detail.locator("a.task-picture-open")
    assert await link.get_attribute("href") == f"/api/runs/{run_id}/diagram"
    assert await link.get_attribute("target") == "_blank"
    assert await p.locator("#tasks-panel svg").count() == 0, "the run picture is never inlined"

    # Nothing the task said became markup.
    assert await p.locator(MARKUP).count() == 0
    assert await p.evaluate("() => window.__pwned") is None
    await picture.scroll_into_view_if_needed()
    await page.screenshot("tasks-panel-done")

    # The timeline: one card for the task, its steps folded inside it; Open shows it in the panel.
    await p.click("#tasks-close")
    assert await p.locator("#tasks-panel").is_hidden()
    card = p.locator(f"#timeline section.task-card[data-task-id='{task_id}']")
    await page.wait_for(CARD_STATE, [task_id, "done"])
    assert await card.locator(".task-card-kind").inner_text() == "Task"
    assert await card.locator(".task-card-goal").inner_text() == GOAL
    assert await card.locator(".task-badge").inner_text() == "Done"
    assert await card.locator(".task-card-end").inner_text() == ANSWER
    # What its model calls cost, as the ledger priced them (issue #29: each task shows its cost).
    calls = httpx.get(f"{sys_.http}/api/usage/calls", params={"span_id": task_id}, headers=sys_.auth(), timeout=10)
    billed = [c for c in calls.raise_for_status().json()["calls"] if c["purpose"] == "task_step"]
    assert len(billed) == 4 and all(c["cost_usd"] > 0 for c in billed), billed
    total = sum(c["cost_usd"] for c in billed)
    words = f"${total:.2f}" if total >= 0.01 else f"${total:.2g}"  # the client's money(): 2 places, or 2 digits
    assert await card.locator(".task-card-cost").inner_text() == f"{words} · 4 model calls"
    assert not await card.locator("details.task-card-steps").evaluate("d => d.open"), "steps are folded"
    steps_in_card = await card.locator(".task-line[data-kind='task.step']").count()
    assert steps_in_card >= 7
    # Every step line on the page is inside the card: no row (or bubble) per step.
    assert await p.locator("#timeline [data-kind='task.step']").count() == steps_in_card
    assert await p.locator("#timeline .inner[data-kind^='task.']").count() == 0
    await page.screenshot("tasks-timeline-card")
    open_button = card.locator("button.task-open")
    label = await open_button.get_attribute("aria-label") or ""
    assert label.startswith("Open in the Tasks panel: Find out what colour"), label
    await open_button.click()
    assert not await p.locator("#tasks-panel").is_hidden()
    await page.wait_for(ROW_SELECTED, task_id)
    assert_clean(page, not_found)


async def test_pause_resume_and_cancel_from_the_panel_follow_the_task_state(
    delegate: Callable[..., Awaitable[System]],
    standin: StandinProcess,
    new_page: NewPage,
    site: TestSite,
    headless_shell: str,
) -> None:
    sys_ = await delegate(env=tasks_env(site, headless_shell), extra=("tasks",))
    # A slow page keeps the task busy in a step that pause and cancel interrupt.
    standin.script(tool_call("browser_open", {"url": site.url("/slow?s=3")}, times=3), answer("done at last"))
    page = await new_page(sys_)
    p = page.page
    not_found = watch_404s(page)
    await p.click("#tasks-btn")
    await page.wait_for_text("#tasks-status", "No tasks yet")
    goal = "Wait for the slow page"
    task_id = await start_task(page, goal)
    row = p.locator(f"{PANEL_ROW}[data-task-id='{task_id}']")
    buttons = {name: row.get_by_role("button", name=f"{name} task: {goal}") for name in ("Pause", "Resume", "Cancel")}

    async def enabled() -> dict[str, bool]:
        return {name: await b.is_enabled() for name, b in buttons.items()}

    # Running: Pause and Cancel; the log says it started.
    await wait_row_state(page, task_id, "running")
    assert await enabled() == {"Pause": True, "Resume": False, "Cancel": True}
    await page.wait_for_text("#task-detail .task-line[data-kind='task.started']", "Started")

    await buttons["Pause"].click()
    await wait_row_state(page, task_id, "paused")
    assert await enabled() == {"Pause": False, "Resume": True, "Cancel": True}
    await page.wait_for_text("#task-detail .task-line[data-kind='task.paused']", "Paused by you")
    assert await row.locator(".task-badge").inner_text() == "Paused"
    assert api_task(sys_, task_id)["state"] == "paused"
    await page.screenshot("tasks-paused")

    await buttons["Resume"].click()
    await wait_row_state(page, task_id, "queued", "running")
    await page.wait_for_text("#task-detail .task-line[data-kind='task.resumed']", "Resumed by you")
    await wait_row_state(page, task_id, "running")
    assert await enabled() == {"Pause": True, "Resume": False, "Cancel": True}

    # Cancel asks first, inline; then the task stops for good.
    await buttons["Cancel"].click()
    await row.get_by_text("Cancel this task? It stops for good.").wait_for()
    await row.get_by_role("button", name=f"Cancel task for good: {goal}").click()
    await wait_row_state(page, task_id, "cancelled")
    await page.wait_for_text("#task-detail .task-line[data-kind='task.cancelled']", "Cancelled by you")
    assert await row.locator(".task-actions").count() == 0
    assert api_task(sys_, task_id)["state"] == "cancelled"
    await page.wait_for_text("#task-detail .task-stream-status", "The task has ended.")
    # A cancelled task has its run picture too.
    await page.wait_for(IMG_LOADED, "#task-detail .task-picture-img", timeout=120_000)
    await page.screenshot("tasks-cancelled")

    # Its timeline card says so.
    await page.wait_for(CARD_STATE, [task_id, "cancelled"])
    assert_clean(page, not_found)
