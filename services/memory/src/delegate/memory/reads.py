"""One read transaction for a reply that takes several SELECTs.

The read connections are in autocommit mode, so each statement sees the index as the newest
commit left it; the follower commits from another thread, so a reply built from two statements
could show half of an event (a person no longer in contacts whose card's number still shows).
Inside ``snapshot`` every statement reads the same WAL snapshot: the one of its first SELECT."""

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def snapshot(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """``db`` inside one read transaction; a nested use joins the one already open."""
    if db.in_transaction:
        yield db
        return
    db.execute("BEGIN")  # deferred: the snapshot is taken by the first SELECT
    try:
        yield db
    finally:
        db.execute("COMMIT")  # nothing was written: ends the read, keeps nothing
