"""Property: walking the history back returns every event once, in (ts, id) order, spans whole.

Random spans with interleaved and equal timestamps; new events (newer than
everything, as in reality) arrive between page requests.
"""

import asyncio
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from delegate.contracts.events import Event
from delegate.ledger.store import LedgerStore

from .builders import BASE, key, message, span_opened
from .conftest import PgSchema, make_store


@dataclass(frozen=True)
class Scenario:
    events: list[Event]
    limit: int
    arrivals: list[list[tuple[int, str | None]]]  # per page request: (span choice, id) of new events


ID = st.text(alphabet="0123456789abcdef-", min_size=3, max_size=10)


@st.composite
def scenarios(draw: st.DrawFn) -> Scenario:
    n_spans = draw(st.integers(0, 6))
    n_loose = draw(st.integers(0 if n_spans else 1, 5))
    sizes = [draw(st.integers(0, 7)) for _ in range(n_spans)]
    total = n_spans + sum(sizes) + n_loose + 40
    ids = iter(draw(st.lists(ID, min_size=total, max_size=total, unique=True)))
    events: list[Event] = []
    for s, size in enumerate(sizes):
        # Whole seconds from a small range: many equal timestamps, broken by id.
        start = draw(st.integers(0, 30))
        span = f"span-{s}"
        events.append(span_opened(span, t=start, id=next(ids)))
        for _ in range(size):
            events.append(message("m", span=span, t=start + draw(st.integers(1, 12)), id=next(ids)))
    for _ in range(n_loose):
        events.append(message("loose", span=None, t=draw(st.integers(0, 45)), id=next(ids)))
    limit = draw(st.integers(1, 6))
    arrivals = draw(st.lists(st.lists(st.tuples(st.integers(0, 2), st.just(None)), max_size=3), max_size=12))
    arrivals = [[(choice, next(ids)) for choice, _ in batch] for batch in arrivals]
    return Scenario(events, limit, arrivals)


async def walk(store: LedgerStore, scenario: Scenario) -> None:
    # Commit in a random-looking order (not timeline order), in two transactions.
    half = len(scenario.events) // 2
    await store.append(scenario.events[half:][::-1])
    await store.append(scenario.events[:half])
    pages: list[list[Event]] = []
    page = await store.page(before=None, limit=scenario.limit, expansion_cap=1000)
    pages.append(page.events)
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
        page = await store.page(before=page.cursor, limit=scenario.limit, expansion_cap=1000)
        assert page.events, "a cursor promised older events"
        pages.append(page.events)

    walked = [e for p in reversed(pages) for e in p]
    expected = sorted(scenario.events, key=key)
    assert [e.id for e in walked] == [e.id for e in expected], "every event once, in (ts, id) order"
    home: dict[str, int] = {}
    for index, p in enumerate(pages):
        assert [key(e) for e in p] == sorted(key(e) for e in p)
        for e in p:
            if e.span_id:
                assert home.setdefault(e.span_id, index) == index, f"span {e.span_id} split across pages"


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


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_walking_pages_back_on_postgres(pg_database: str, scenario: Scenario) -> None:
    with PgSchema(pg_database) as url:
        _run("postgres", scenario, url)
