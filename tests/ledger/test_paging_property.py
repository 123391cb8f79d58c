"""Property: walking the history back returns every event once, in (ts, id) order, spans whole.

Random spans with interleaved and equal timestamps; new events (newer than
everything, as in reality) arrive between page requests. With a byte budget (a reply
must fit one NATS message) and events of random sizes, pages still join exactly and stay
within it; a span is then split only by a page that says it was capped.
"""

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.contracts.events import Event
from delegate.ledger.store import LedgerStore
from delegate.ledger.store.base import Page, reply_bytes

from .builders import BASE, key, message, span_opened
from .conftest import PgSchema, make_store


@dataclass(frozen=True)
class Scenario:
    events: list[Event]
    limit: int
    arrivals: list[list[tuple[int, str | None]]]  # per page request: (span choice, id) of new events
    max_bytes: int | None = None


ID = st.text(alphabet="0123456789abcdef-", min_size=3, max_size=10)


@st.composite
def scenarios(draw: st.DrawFn, budgeted: bool = False) -> Scenario:
    n_spans = draw(st.integers(0, 6))
    n_loose = draw(st.integers(0 if n_spans else 1, 5))
    sizes = [draw(st.integers(0, 7)) for _ in range(n_spans)]

    def text() -> str:  # with a budget: events from tiny to bigger than the whole budget
        return "m" * draw(st.integers(0, 1500)) if budgeted else "m"

    total = n_spans + sum(sizes) + n_loose + 40
    ids = iter(draw(st.lists(ID, min_size=total, max_size=total, unique=True)))
    events: list[Event] = []
    for s, size in enumerate(sizes):
        # Whole seconds from a small range: many equal timestamps, broken by id.
        start = draw(st.integers(0, 30))
        span = f"span-{s}"
        events.append(span_opened(span, t=start, id=next(ids)))
        for _ in range(size):
            events.append(message(text(), span=span, t=start + draw(st.integers(1, 12)), id=next(ids)))
    for _ in range(n_loose):
        events.append(message("loose" + text(), span=None, t=draw(st.integers(0, 45)), id=next(ids)))
    limit = draw(st.integers(1, 6))
    drawn = draw(st.lists(st.lists(st.tuples(st.integers(0, 2), st.just(None)), max_size=3), max_size=12))
    arrivals: list[list[tuple[int, str | None]]] = [[(choice, next(ids)) for choice, _ in batch] for batch in drawn]
    max_bytes = draw(st.integers(300, 4000)) if budgeted else None
    return Scenario(events, limit, arrivals, max_bytes)


async def walk(store: LedgerStore, scenario: Scenario) -> None:
    # Commit in a random-looking order (not timeline order), in two transactions.
    half = len(scenario.events) // 2
    await store.append(scenario.events[half:][::-1])
    await store.append(scenario.events[:half])
    pages: list[Page] = []
    page = await store.page(before=None, limit=scenario.limit, expansion_cap=1000, max_bytes=scenario.max_bytes)
    pages.append(page)
    first_page_spans = sorted({e.span_id for e in page.events if e.span_id})
    newest = max((key(e) for e in scenario.events), default=None)
    clock = ((newest[0] - BASE).total_seconds() if newest else 0) + 1
    arrivals = iter(scenario.arrivals)
    while page.cursor is not None:
        for choice, new_id in next(arrivals, []):
            # New events go to the open span (one the first page holds), a new span, or none.
            span = {0: None, 1: f"new-{new_id}", 2: first_page_spans[-1] if first_page_spans else None}[choice]
            assert new_id is not None
            await store.append([message("late", span=span, t=clock, id=new_id)])
            clock += 1
        page = await store.page(before=page.cursor, limit=scenario.limit, expansion_cap=1000,
                                max_bytes=scenario.max_bytes)
        assert page.events, "a cursor promised older events"
        pages.append(page)

    walked = [e for p in reversed(pages) for e in p.events]
    expected = sorted(scenario.events, key=key)
    assert [e.id for e in walked] == [e.id for e in expected], "every event once, in (ts, id) order"
    for p in pages:
        assert [r.key for r in p.rows] == sorted(r.key for r in p.rows)
        if scenario.max_bytes is not None and len(p.rows) > 1:
            assert sum(reply_bytes(r) for r in p.rows) <= scenario.max_bytes, "within the byte budget"
        # Every span on a page starts on it, unless the page says it was cut short (the
        # expansion cap or the byte budget): the older rest of the span is then on the next page.
        starts = {r.span_id for r in p.rows if r.kind == "span.opened"}
        split = {r.span_id for r in p.rows if r.span_id} - starts
        assert not split or p.capped, f"span(s) {split} split by a page that was not capped"


def _run(backend: str, scenario: Scenario, pg_url: str | None = None) -> None:
    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            store = make_store(backend, Path(tmp), pg_url)
            await store.open()
            try:
                await walk(store, scenario)
            finally:
                await store.close()

    asyncio.run(main())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_walking_pages_back_on_sqlite(scenario: Scenario) -> None:
    _run("sqlite-wal", scenario)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(budgeted=True))
def test_walking_pages_back_within_a_byte_budget_on_sqlite(scenario: Scenario) -> None:
    _run("sqlite-wal", scenario)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(budgeted=True))
def test_walking_pages_back_within_a_byte_budget_on_postgres(pg_database: str, scenario: Scenario) -> None:
    with PgSchema(pg_database) as url:
        _run("postgres", scenario, url)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_walking_pages_back_on_postgres(pg_database: str, scenario: Scenario) -> None:
    with PgSchema(pg_database) as url:
        _run("postgres", scenario, url)
