"""What differs between the ledger's two SQL backends, as one small object each backend fills in.

The SQL itself is written once (``statements``) with ``?`` marks and ``GREATEST``; a dialect
renders it (placeholders, the two-argument maximum), says how a timestamp is bound and read
back, how "one of these values" is spelled, and which of its driver's errors mean "the database
is unavailable", "the request's value cannot be stored" or "the data is wrong".
"""

import contextlib
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .base import BadValue, StoredEvent, StoreUnavailable

Errors = tuple[type[BaseException], ...]


@dataclass(frozen=True)
class Dialect:
    name: str
    mark: str  # the driver's placeholder
    greatest: str  # the scalar maximum of two values: SQLite's MAX(a, b), PostgreSQL's GREATEST(a, b)
    payload: str  # how a SELECT reads the payload column as text
    bind_ts: Callable[[datetime], Any]  # a timestamp as bound: SQLite stores the wire text, PostgreSQL timestamptz
    read_ts: Callable[[Any], datetime]  # ... and as read back
    stored: Callable[[Sequence[Any]], StoredEvent]  # an event row (``statements.COLS``) as read back
    any_of_array: bool  # "column = ANY(array)", one parameter; else "column IN (?, ?, ...)", one per value
    unavailable: Errors  # the database cannot be reached or is busy: retry later
    data_errors: Errors  # about the data, not the database: raised as they are
    bad_values: Errors  # a value the database cannot hold: a read's request is wrong (``BadValue``)

    def sql(self, text: str) -> str:
        """``text``, written with ``?`` marks and ``GREATEST(``, in this dialect."""
        return text.replace("GREATEST(", f"{self.greatest}(").replace("?", self.mark)

    def bind_ts_or_none(self, value: datetime | None) -> Any:
        return None if value is None else self.bind_ts(value)

    def any_of(self, column: str, values: Collection[Any]) -> tuple[str, list[Any]]:
        """A condition that ``column`` is one of ``values``, and its parameters."""
        if self.any_of_array:
            return f"{column} = ANY({self.mark})", [list(values)]
        return f"{column} IN ({', '.join([self.mark] * len(values))})", list(values)

    @contextlib.contextmanager
    def errors(self, *, reads: bool = False) -> Iterator[None]:
        """The driver's errors as the store's: ``StoreUnavailable``, and ``BadValue`` for a read."""
        try:
            yield
        except self.bad_values as exc:
            if reads:
                raise BadValue(f"a value the database cannot hold: {exc}") from exc
            raise
        except self.data_errors:
            raise  # retrying the same events would fail again
        except self.unavailable as exc:
            raise StoreUnavailable(f"{self.name}: {exc}") from exc
