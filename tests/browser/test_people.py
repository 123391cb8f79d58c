"""People and Commitments panels in the browser (issue #30), against the real ledger, memory
service and gateway: the events the memory service would write are committed through the
ledger, the memory service projects them, and the panels read the API."""

from collections.abc import Awaitable, Callable
from datetime import timedelta

import pytest

from delegate.contracts import topics
from delegate.contracts.events import (
    CommitmentKept,
    CommitmentMade,
    Event,
    MemoryFactAdded,
    Message,
    Payload,
    PersonAdded,
    PersonMentioned,
    make_event,
)
from delegate.contracts.ids import new_id, utcnow
from delegate.contracts.people import CommitmentsCommand, PeopleCommand
from delegate.runtime.bus import Bus
from tests.support.system import System
from tests.support.waiting import eventually

from .chat_page import ChatPage

pytestmark = [pytest.mark.browser, pytest.mark.integration]

PERSON = "#people-list li.person"


def inner(payload: Payload) -> Event:
    return make_event(payload, conversation_id=None, span_id=None, channel="inner")


async def commit(bus: Bus, events: list[Event]) -> None:
    for event in events:
        await bus.publish(topics.ledger_append("test"), event)


async def test_the_people_panel_shows_a_person_their_cited_facts_and_forgets_them(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(extra=("memory",), env={"OWNER_TIMEZONE": "UTC"})
    bus = await Bus.connect(sys_.nats_url, "test-probe")
    try:
        said = make_event(Message(text="My sister Ana <b>Costa</b> loves sailing."), conversation_id=None,
                          span_id=None, channel="sms", role="user")
        fact_id, pid = new_id(), new_id()
        soon = (utcnow() + timedelta(days=10)).strftime("%m-%d")
        await commit(bus, [
            said,
            inner(MemoryFactAdded(fact_id=fact_id, text="Ana <b>Costa</b> loves sailing.", valid_at=said.ts,
                                  event_ids=[said.id])),
            inner(PersonAdded(person_id=pid, name="Ana <b>Costa</b>", aliases=["Ana"], relation="sister",
                              phones=["+351 912 345 678"], dates=[{"label": "birthday", "date": soon}],
                              event_ids=[said.id])),
            inner(PersonMentioned(person_id=pid, fact_ids=[fact_id], event_ids=[said.id])),
        ])

        async def linked() -> bool:
            reply = await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="list"))
            return any(p.facts == 1 for p in reply.people)

        await eventually(linked, "the person in the memory index")
        page = await new_page(sys_)
        p = page.page
        await p.click("#people-btn")
        await page.wait_for_text(PERSON, "Ana <b>Costa</b>")
        row = p.locator(f"{PERSON}[data-person-id='{pid}']")
        meta = await row.locator(".reminder-meta").inner_text()
        assert "sister" in meta and "+351 912 345 678" in meta and "1 fact" in meta
        assert await row.locator("b").count() == 0, "names are text, never markup"

        await row.get_by_role("button", name="Ana <b>Costa</b>").click()
        await page.wait_for_text(f"{PERSON} .person-facts", "loves sailing")
        detail = p.locator(f"{PERSON}[data-person-id='{pid}'] .person-detail")
        assert "birthday" in await detail.locator(".person-upcoming").inner_text()
        assert await detail.get_by_role("button", name="Source 1 of: Ana <b>Costa</b> loves sailing.").count() == 1
        assert "sms" in await detail.locator(".person-mentions").inner_text()
        await page.screenshot("people-panel")

        await detail.get_by_role("button", name="Forget Ana <b>Costa</b>").click()
        await detail.get_by_role("button", name="Yes, forget").click()
        await page.wait_for("sel => document.querySelectorAll(sel).length === 0", PERSON)
        assert (await bus.request(topics.MEMORY_PEOPLE, PeopleCommand(op="list"))).people == []
        assert "No one yet" in await p.locator("#people-status").inner_text()
        page.assert_clean()
    finally:
        await bus.close()


async def test_the_commitments_panel_groups_due_soon_open_and_done_and_follows_changes(
    delegate: Callable[..., Awaitable[System]], new_page: Callable[..., Awaitable[ChatPage]]
) -> None:
    sys_ = await delegate(extra=("memory",))
    bus = await Bus.connect(sys_.nats_url, "test-probe")
    try:
        now = utcnow()
        soon, later, done = new_id(), new_id(), new_id()
        await commit(bus, [
            inner(CommitmentMade(commitment_id=soon, by="owner", what="send Ana the photos", to="Ana",
                                 due=now + timedelta(hours=3), due_text="tonight")),
            inner(CommitmentMade(commitment_id=later, by="assistant", what="check the train <i>times</i>",
                                 due=now + timedelta(days=9))),
            inner(CommitmentMade(commitment_id=done, by="owner", what="call the plumber")),
            inner(CommitmentKept(commitment_id=done, reason="the owner said done")),
        ])

        async def three() -> bool:
            reply = await bus.request(topics.MEMORY_COMMITMENTS, CommitmentsCommand(op="list", state="all"))
            return len(reply.commitments) == 3 and any(c.state == "kept" for c in reply.commitments)

        await eventually(three, "the commitments in the memory index")
        page = await new_page(sys_)
        p = page.page
        await page.action("#commitments-btn")
        await page.wait_for_text("#commitments-soon li", "send Ana the photos")
        assert "You → Ana" in await p.locator("#commitments-soon li").inner_text()
        open_row = p.locator(f"#commitments-open li[data-commitment-id='{later}']")
        assert "Delegate" in await open_row.inner_text()
        assert await open_row.locator("i").count() == 0
        kept = p.locator(f"#commitments-done li[data-commitment-id='{done}']")
        assert "kept" in await kept.inner_text()
        await page.screenshot("commitments-panel")

        # kept while the panel is open: it moves to Done by itself (its commitment.kept over /chat)
        await commit(bus, [inner(CommitmentKept(commitment_id=soon, reason="sent"))])
        await page.wait_for_text("#commitments-done li", "send Ana the photos")
        assert await p.locator("#commitments-soon").is_hidden()
        page.assert_clean()
    finally:
        await bus.close()
