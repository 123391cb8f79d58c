"""The chat controls in Chromium: Stop generating, Regenerate, Edit-and-resend.

The real system (ledger, agent, gateway) against the stand-in; the page is driven as a person
would (clicks, typing), and both the timeline and the stand-in's recorded requests are checked.
"""

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.agent.rig import input_texts
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage, ledger_events

pytestmark = [pytest.mark.browser, pytest.mark.integration]

NewPage = Callable[..., Awaitable[ChatPage]]
LONG = " ".join(f"Sentence number {i} of a very long answer." for i in range(80))


def bodies(standin: StandinProcess) -> list[dict[str, Any]]:
    return [r["body"] for r in standin.response_requests()]


def assistant_messages(system: System, parent_id: str) -> list[dict[str, Any]]:
    return [
        e for e in ledger_events(system)
        if e["kind"] == "message" and e["role"] == "assistant" and e["parent_id"] == parent_id
    ]


def user_messages(system: System) -> list[dict[str, Any]]:
    return [e for e in ledger_events(system) if e["kind"] == "message" and e["role"] == "user"]


async def test_stop_generating_keeps_the_partial_answer_marked_stopped(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script({"action": "slow", "delay_ms": 120, "text": LONG}, {"action": "slow", "delay_ms": 120, "text": LONG})
    page = await new_page(sys_)
    p = page.page

    await page.send("Tell me a long story")
    await p.wait_for_selector("#stop-btn:not([hidden])")
    # Let a few words stream in, then press Stop.
    await page.wait_for("() => (document.querySelector('#timeline .streaming')?.textContent || '').length > 60")
    await page.screenshot("chat-controls-streaming")
    await p.click("#stop-btn")

    await p.wait_for_selector("#timeline article.msg-assistant .mark-stopped")
    await p.wait_for_selector("#stop-btn", state="hidden")
    [question] = user_messages(sys_)
    [answer] = assistant_messages(sys_, question["id"])
    assert answer["payload"]["stopped"] is True
    partial = answer["payload"]["text"]
    assert partial and LONG.startswith(partial) and len(partial) < len(LONG)
    shown = await p.eval_on_selector(
        f'#timeline article.msg[data-event-id="{answer["id"]}"] .bubble', "n => n.textContent"
    )
    assert shown.strip().startswith("Sentence number 0") and len(shown.strip()) <= len(partial)
    # The stand-in saw the connection drop: its response ended incomplete.
    rid = answer["payload"]["response_id"]
    await eventually(lambda: standin.stored(rid)["response"]["status"] == "incomplete",
                     "the stand-in's response stored as incomplete")
    await page.screenshot("chat-controls-stopped")
    # Stop went away under the click: focus is in the composer, not lost on the page.
    assert await p.evaluate("() => document.activeElement.id") == "input"

    # Escape stops a streaming answer too (from the composer, with nothing else open).
    await page.send("Tell me another one")
    await p.wait_for_selector("#stop-btn:not([hidden])")
    await page.wait_for("() => (document.querySelector('#timeline .streaming')?.textContent || '').length > 60")
    await p.focus("#input")
    await p.keyboard.press("Escape")
    await page.wait_for("() => document.querySelectorAll('#timeline article.msg-assistant .mark-stopped').length === 2")
    await p.wait_for_selector("#stop-btn", state="hidden")
    page.assert_clean()


async def test_regenerate_and_edit_resend_in_the_page(
    delegate: Callable[..., Awaitable[System]], standin: StandinProcess, new_page: NewPage
) -> None:
    sys_ = await delegate()
    standin.script(
        {"action": "text", "text": "Noted: your dog is called **Rex**."},
        {"action": "text", "text": "Here is a first poem about Rex."},
        {"action": "text", "text": "Here is a *second* poem about Rex."},
        {"action": "text", "text": "Rex is a good dog, and that is the short answer."},
    )
    page = await new_page(sys_)
    p = page.page

    await page.send("My dog is called Rex.")
    await page.wait_for_text("#timeline article.msg-assistant .bubble", "Noted")
    await page.send("Write a poem about my dog")
    await page.wait_for_text("#timeline article.msg-assistant .bubble", "first poem")
    first_answer = assistant_messages(sys_, user_messages(sys_)[-1]["id"])[0]

    # Regenerate the last answer: a new attempt, shown in place of the old one.
    regen = p.locator("#timeline article.msg-assistant .act-regenerate:visible")
    await regen.last.wait_for()
    await regen.last.click()
    await page.wait_for_text("#timeline article.msg-assistant .bubble", "second")
    poem_turn = user_messages(sys_)[-1]["id"]
    await eventually(lambda: len(assistant_messages(sys_, poem_turn)) == 2, "the poem turn's two assistant messages")
    second = assistant_messages(sys_, poem_turn)[-1]
    assert (second["payload"]["attempt"], second["payload"]["regenerates"]) == (2, first_answer["id"])
    await p.wait_for_selector(f'#timeline article.msg[data-event-id="{second["id"]}"][data-attempt="2"]')
    await page.screenshot("chat-controls-regenerated")
    # The new attempt continued from before the first poem, and was asked the same question.
    noted = assistant_messages(sys_, user_messages(sys_)[0]["id"])[0]
    regen_body = bodies(standin)[2]
    assert regen_body["previous_response_id"] == noted["payload"]["response_id"]
    assert input_texts(regen_body) == ["Write a poem about my dog"]

    # Edit and resend the last question.
    edit = p.locator("#timeline article.msg-user .act-edit:visible")
    await edit.last.wait_for()
    await edit.last.click()
    await p.wait_for_selector("#edit-bar:not([hidden])")
    assert await p.input_value("#input") == "Write a poem about my dog"
    await p.fill("#input", "Just tell me: is Rex a good dog?")
    await page.screenshot("chat-controls-editing")
    await p.keyboard.press("Enter")
    await page.wait_for_text("#timeline article.msg-assistant .bubble", "good dog, and that is")
    await p.wait_for_selector("#timeline article.msg-user .mark-edited")
    edited = user_messages(sys_)[-1]
    assert edited["payload"]["supersedes"] == poem_turn
    assert edited["payload"]["text"] == "Just tell me: is Rex a good dog?"
    # History keeps the old question; the model never saw it again.
    assert any(m["id"] == poem_turn for m in user_messages(sys_))
    edit_body = bodies(standin)[3]
    assert edit_body["previous_response_id"] == noted["payload"]["response_id"]
    assert input_texts(edit_body) == ["Just tell me: is Rex a good dog?"]
    await page.screenshot("chat-controls-edited")
    page.assert_clean()
