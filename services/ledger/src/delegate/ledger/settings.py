from typing import Literal

from pydantic import Field, ValidationInfo, field_validator

from delegate.runtime.settings import ServiceSettings

JournalMode = Literal["WAL", "DELETE"]


class Settings(ServiceSettings):
    database_url: str | None = None  # DATABASE_URL: postgresql://… selects PostgreSQL; unset → SQLite
    # SQLITE_JOURNAL_MODE: unset → WAL, or DELETE when RUNTIME_DATA_DIR sits on a network filesystem
    sqlite_journal_mode: JournalMode | None = None
    timeline_history_event_limit: int = 500  # TIMELINE_HISTORY_EVENT_LIMIT: size of the first page
    # LEDGER_PAGE_EXPANSION_CAP: how many events a page may grow by to keep a span whole
    ledger_page_expansion_cap: int = 2000
    ledger_batch_size: int = 256  # LEDGER_BATCH_SIZE: events fetched and committed per transaction
    # LEDGER_ACK_WAIT_SECONDS: after a crash, the batch it held is redelivered this long after its
    # delivery. A batch still with the writer (up to its 120 s timeout) is not: the ledger sends
    # in_progress for it every third of this.
    ledger_ack_wait_seconds: float = Field(default=10.0, ge=0.5)

    @field_validator("database_url", "sqlite_journal_mode", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object, info: ValidationInfo) -> object:
        # An empty variable in .env or compose means "not set", not "an empty URL".
        if not isinstance(value, str):
            return value
        value = value.strip()
        if info.field_name == "sqlite_journal_mode":
            value = value.upper()
        return value or None
