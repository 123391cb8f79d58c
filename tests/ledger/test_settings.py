"""Which database and journal the settings select, and network-filesystem detection."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from delegate.ledger.fs import default_journal_mode, is_network_fs, mount_fstype
from delegate.ledger.settings import Settings
from delegate.ledger.store import open_store, sqlite_path
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore
from delegate.ledger.writer import WriterSettings, writer_env

MOUNTINFO = r"""22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:40 / /srv rw shared:2 - nfs4 server:/export rw,vers=4.2
31 30 0:41 / /srv/local\040disk rw shared:3 - ext4 /dev/sdb1 rw
32 22 0:42 / /mnt/share rw shared:4 - cifs //nas/share rw
33 22 0:43 / /mnt/keys rw shared:5 - fuse.sshfs host:/keys rw
"""


@pytest.mark.parametrize(
    ("path", "fstype", "mode"),
    [
        ("/home/me/runtime-data", "ext4", "WAL"),
        ("/srv/delegate/runtime-data", "nfs4", "DELETE"),
        ("/srv/local disk/runtime-data", "ext4", "WAL"),  # a local disk mounted inside the NFS tree
        ("/mnt/share/data/db", "cifs", "DELETE"),
        ("/mnt/keys/x", "fuse.sshfs", "DELETE"),
        ("/srvx/data", "ext4", "WAL"),  # a prefix of the name is not a parent directory
    ],
)
def test_network_filesystems_get_the_rollback_journal(path: str, fstype: str, mode: str) -> None:
    assert mount_fstype(Path(path), MOUNTINFO) == fstype
    assert default_journal_mode(Path(path), MOUNTINFO) == mode


def test_network_fs_names() -> None:
    assert all(is_network_fs(t) for t in ("nfs", "cifs", "smb3", "9p", "fuse.gcsfuse", "virtiofs"))
    assert not any(is_network_fs(t) for t in ("ext4", "xfs", "btrfs", "tmpfs", "overlay", None))


def test_this_machine_reads_its_own_mountinfo(tmp_path: Path) -> None:
    assert mount_fstype(tmp_path) is not None


def test_settings_pick_the_backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DATABASE_URL", "SQLITE_JOURNAL_MODE", "TIMELINE_HISTORY_EVENT_LIMIT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("RUNTIME_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("SQLITE_JOURNAL_MODE", "delete")
    monkeypatch.setenv("DATABASE_URL", "")
    settings = Settings(_env_file=None)
    assert settings.database_url is None and settings.sqlite_journal_mode == "DELETE"
    assert settings.timeline_history_event_limit == 500
    store = open_store(
        database_url=settings.database_url, runtime_data_dir=settings.runtime_data_dir,
        sqlite_journal_mode=settings.sqlite_journal_mode,
    )
    assert isinstance(store, SqliteStore) and store.journal_mode == "DELETE"
    assert store.path == sqlite_path(tmp_path) == tmp_path / "db" / "assistant.sqlite"

    monkeypatch.setenv("DATABASE_URL", "postgresql://u@db:5432/delegate")
    settings = Settings(_env_file=None)
    store = open_store(database_url=settings.database_url, runtime_data_dir=tmp_path)
    assert isinstance(store, PostgresStore)
    with pytest.raises(ValueError, match="postgresql://"):
        open_store(database_url="mysql://nope", runtime_data_dir=tmp_path)


def test_ack_wait_is_bounded_below(monkeypatch: pytest.MonkeyPatch) -> None:
    # in_progress goes out every third of it: a tiny ack_wait would flood the bus with them.
    monkeypatch.setenv("LEDGER_ACK_WAIT_SECONDS", "0.1")
    with pytest.raises(ValidationError, match="ledger_ack_wait_seconds"):
        Settings(_env_file=None)
    monkeypatch.setenv("LEDGER_ACK_WAIT_SECONDS", "30")
    assert Settings(_env_file=None).ledger_ack_wait_seconds == 30.0


@pytest.mark.parametrize("database_url", [None, "postgresql://u@db:5432/delegate"])
def test_the_writer_process_reads_what_the_ledger_resolved(database_url: str | None, tmp_path: Path) -> None:
    """The writer reads five values from the environment the ledger gives it, not ``Settings``:
    each is what the ledger's own settings said, though they came from code, not the environment."""
    settings = Settings(
        _env_file=None, runtime_data_dir=tmp_path / "data", database_url=database_url, sqlite_journal_mode="delete",
        log_level="DEBUG", instance_name="ledger-2",
    )
    store = open_store(
        database_url=settings.database_url, runtime_data_dir=settings.runtime_data_dir,
        sqlite_journal_mode=settings.sqlite_journal_mode,
    )
    read = WriterSettings.from_environ(writer_env(settings, store))
    assert read == WriterSettings(
        database_url=database_url, sqlite_journal_mode=None if database_url else "DELETE",
        runtime_data_dir=(tmp_path / "data").resolve(), log_level="DEBUG", instance_name="ledger-2",
    )
