"""The ledger's storage: one interface (``LedgerStore``), a SQLite and a PostgreSQL backend."""

from pathlib import Path

from ..fs import default_journal_mode
from .base import BadValue, LedgerStore, Page, QueryResult, StoreUnavailable

__all__ = ["BadValue", "LedgerStore", "Page", "QueryResult", "StoreUnavailable", "open_store", "sqlite_path"]

POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def sqlite_path(runtime_data_dir: Path) -> Path:
    return runtime_data_dir / "db" / "assistant.sqlite"


def open_store(
    *, database_url: str | None, runtime_data_dir: Path, sqlite_journal_mode: str | None = None
) -> LedgerStore:
    """The backend the settings select (not yet opened): PostgreSQL for a postgresql:// URL, else SQLite."""
    if database_url:
        if not database_url.startswith(POSTGRES_SCHEMES):
            raise ValueError("DATABASE_URL must be a postgresql:// URL (leave it unset for SQLite)")
        from .postgres import PostgresStore

        return PostgresStore(database_url)
    from .sqlite import SqliteStore

    path = sqlite_path(runtime_data_dir)
    mode = sqlite_journal_mode or default_journal_mode(path.parent)
    return SqliteStore(path, journal_mode=mode)
