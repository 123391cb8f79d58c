"""``backup PATH`` and ``restore PATH``: online backups of the ledger that are proven before
anyone relies on them.

SQLite: SQLite's backup API copies one consistent snapshot while the ledger keeps writing,
into a temporary file beside PATH that is checked (integrity, schema version, every event
readable) before an atomic rename makes it PATH. PostgreSQL: ``pg_dump --format=custom``
from a snapshot whose event count and last seq are read in that same snapshot, checked with
``pg_restore --list``.

A restore checks the backup first and changes nothing when it fails. It refuses while the
ledger has the database open, and keeps what it replaces (SQLite: ``<file>.before-restore-
<time>``; PostgreSQL: a dump of the database beside the backup under that name).
"""

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import TupleRow

from .settings import Settings
from .store import sqlite_path
from .store.base import migrations

LOCK_PROBE_SECONDS = 2.0  # how long a restore waits for the live database's write lock
SIDECARS = ("-wal", "-shm", "-journal")
# In a WAL database's -shm file every open connection holds a read lock on this byte (the
# "dead man switch", 120 + 8 in SQLite's os_unix.c) for as long as it is open: an idle ledger
# holds no write lock, but it holds this one.
SHM_DMS_BYTE = 128


class BackupError(Exception):
    """Why a backup or a restore was refused; the command prints it and exits non-zero."""


@dataclass(frozen=True)
class Proof:
    """What a verified copy holds."""

    events: int
    last_seq: int
    schema: int


async def backup(settings: Settings, path: str) -> int:
    target, url = Path(path), settings.database_url
    live = sqlite_path(settings.runtime_data_dir)
    return await _run("backup", lambda: _pg_backup(url, target) if url else _sqlite_backup(live, target), target)


async def restore(settings: Settings, path: str) -> int:
    source, url = Path(path), settings.database_url
    live = sqlite_path(settings.runtime_data_dir)
    return await _run("restore", lambda: _pg_restore(url, source) if url else _sqlite_restore(source, live), source)


async def _run(what: str, work: Callable[[], Proof], path: Path) -> int:
    started = time.monotonic()
    try:
        proof, size = await asyncio.to_thread(lambda: (work(), path.stat().st_size))
    except (BackupError, OSError) as exc:  # OSError: a full disk, a folder we may not write
        sys.stderr.write(f"{what} refused: {exc}\n")
        return 1
    sys.stdout.write(f"{what} {path}: {proof.events} events, last seq {proof.last_seq}, schema v{proof.schema},"
                     f" {size} bytes, {time.monotonic() - started:.2f} s\n")
    return 0


# ---- SQLite -----------------------------------------------------------------------------


def _sqlite_backup(live: Path, target: Path) -> Proof:
    if not live.exists():
        raise BackupError(f"no ledger database at {live}")
    _not_the_live_file(target, live)
    with _temporary_beside(target) as tmp:
        # Read-only: the backup can never write to the live file. One step (pages=-1) copies
        # one snapshot under one read transaction, which under WAL never blocks the ledger's
        # commits; copying in several steps would start over whenever the ledger commits
        # between two of them, and might never finish on a busy ledger. (Under the DELETE
        # journal the ledger's commits wait for the copy, up to its busy timeout.)
        try:
            src = sqlite3.connect(f"{live.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
            try:
                dst = sqlite3.connect(tmp)
                try:
                    src.backup(dst, pages=-1)
                finally:
                    dst.close()
            finally:
                src.close()
        except sqlite3.Error as exc:
            raise BackupError(f"copying {live}: {exc}") from exc
        proof = verify_sqlite(tmp)
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(target.parent)
    return proof


def _sqlite_restore(backup_file: Path, live: Path) -> Proof:
    if not backup_file.is_file():
        raise BackupError(f"no backup at {backup_file}")
    _not_the_live_file(backup_file, live)
    live.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _temporary_beside(live) as tmp:
        # The bytes checked are the bytes put in place: the copy, not the file given.
        shutil.copyfile(backup_file, tmp)
        proof = verify_sqlite(tmp)
        expected = migrations("sqlite")[-1].version
        if proof.schema != expected:
            raise BackupError(f"the backup is at schema v{proof.schema}; this ledger's is v{expected}")
        _refuse_if_open(live)
        _fsync(tmp)
        kept = _kept_name(live)
        if live.exists():
            # The -wal holds commits not yet checkpointed: it moves with its file, under the name
            # SQLite looks for, so the kept database opens whole.
            for suffix in ("", *SIDECARS):
                with contextlib.suppress(FileNotFoundError):
                    os.replace(f"{live}{suffix}", f"{kept}{suffix}")
        os.replace(tmp, live)
        _fsync(live.parent)
    return proof


def verify_sqlite(path: Path) -> Proof:
    """Integrity, schema version and every event readable, in seq order; else BackupError."""
    try:
        conn = sqlite3.connect(path, isolation_level=None)
        try:
            # Our own copy: one self-contained file, whatever journal its source used.
            conn.execute("PRAGMA journal_mode = DELETE")
            problems = [row[0] for row in conn.execute("PRAGMA integrity_check")]
            if problems != ["ok"]:
                raise BackupError(f"integrity check failed: {'; '.join(problems[:5])}")
            schema = int(conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()[0])
            events, last_seq = _read_events(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise BackupError(f"not a readable ledger database: {exc}") from exc
    if schema < 1:
        raise BackupError("no schema version: not a ledger database")
    return Proof(events, last_seq, schema)


def _read_events(conn: sqlite3.Connection) -> tuple[int, int]:
    events = last_seq = 0
    for seq, event_id, payload in conn.execute("SELECT seq, id, payload FROM conversation_events ORDER BY seq"):
        if not event_id or seq <= last_seq:
            raise BackupError(f"event at seq {seq} is damaged")
        try:
            json.loads(payload)
        except (TypeError, ValueError) as exc:
            raise BackupError(f"event {event_id} (seq {seq}) is unreadable: {exc}") from exc
        events, last_seq = events + 1, seq
    return events, last_seq


def _refuse_if_open(live: Path) -> None:
    """Refuse while anything (the ledger) has the live database open or is writing to it."""
    if not live.exists():
        return
    shm = Path(f"{live}-shm")
    if shm.exists():
        # Probed before any connection of ours opens the file: closing this descriptor drops
        # every POSIX lock this process holds on it, which would break such a connection.
        fd = os.open(shm, os.O_RDWR)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
            fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        except OSError:
            raise BackupError(f"{live} is open in another process: stop the ledger first") from None
        finally:
            os.close(fd)
    try:
        conn = sqlite3.connect(live, isolation_level=None, timeout=LOCK_PROBE_SECONDS)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
        finally:
            conn.close()
    except sqlite3.Error as exc:
        if exc.sqlite_errorcode & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            raise BackupError(f"{live} is locked for writing ({exc}): stop the ledger first") from exc
        # Damaged or not a database at all: what a restore is for. It is kept aside, not refused.


# ---- PostgreSQL -------------------------------------------------------------------------


def _pg_backup(url: str, target: Path) -> Proof:
    _require("pg_dump")
    dbname, env = _libpq(url)
    with _temporary_beside(target) as tmp:
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                # The counts are read in the very snapshot pg_dump copies: the transaction that
                # exported it stays open until the dump is done.
                conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                snapshot = conn.execute("SELECT pg_export_snapshot()").fetchone()
                proof = _pg_proof(conn)
                assert snapshot is not None
                _tool(["pg_dump", "--format=custom", f"--snapshot={snapshot[0]}", f"--file={tmp}",
                       f"--dbname={dbname}"], env)
                conn.execute("COMMIT")
        except psycopg.Error as exc:
            raise BackupError(f"reading the database: {exc}") from exc
        _pg_listed(tmp, env)
        _fsync(tmp)
        os.replace(tmp, target)
        _fsync(target.parent)
    return proof


def _pg_restore(url: str, backup_file: Path) -> Proof:
    _require("pg_restore")
    _require("pg_dump")
    if not backup_file.is_file():
        raise BackupError(f"no backup at {backup_file}")
    dbname, env = _libpq(url)
    _pg_listed(backup_file, env)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        if others and others[0]:
            raise BackupError(f"{others[0]} other session(s) use the database: stop the ledger first")
        kept = _kept_name(backup_file.with_name(str(conninfo_to_dict(dbname).get("dbname") or "ledger")))
        _tool(["pg_dump", "--format=custom", f"--file={kept}", f"--dbname={dbname}"], env)
        os.chmod(kept, 0o600)
        # One transaction: a restore that fails half-way leaves the database as it was.
        # --no-owner: the objects belong to whoever restores, who may not be who dumped.
        _tool(["pg_restore", "--clean", "--if-exists", "--single-transaction", "--no-owner",
               f"--dbname={dbname}", str(backup_file)], env)
        with psycopg.connect(url, autocommit=True) as conn:
            proof = _pg_proof(conn)
    except psycopg.Error as exc:
        raise BackupError(f"the database: {exc}") from exc
    expected = migrations("postgres")[-1].version
    if proof.schema != expected:
        raise BackupError(f"restored, but at schema v{proof.schema}; this ledger's is v{expected}")
    return proof


def _pg_proof(conn: psycopg.Connection[TupleRow]) -> Proof:
    schema = conn.execute("SELECT COALESCE(MAX(version), 0) FROM schema_version").fetchone()
    counts = conn.execute("SELECT count(*), COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()
    assert schema is not None and counts is not None
    return Proof(int(counts[0]), int(counts[1]), int(schema[0]))


def _pg_listed(dump: Path, env: dict[str, str]) -> None:
    listing = _tool(["pg_restore", "--list", str(dump)], env)
    if "TABLE DATA" not in listing or "conversation_events" not in listing:
        raise BackupError(f"{dump} holds no ledger events")


def _libpq(url: str) -> tuple[str, dict[str, str]]:
    """The URL without its password, which goes in the environment: not on a command line,
    where every user of the machine can read it."""
    params = conninfo_to_dict(url)
    password = params.pop("password", None)
    env = dict(os.environ)
    if password:
        env["PGPASSWORD"] = str(password)
    return make_conninfo(**{k: str(v) for k, v in params.items() if v is not None}), env


def _require(tool: str) -> None:
    if shutil.which(tool) is None:
        raise BackupError(f"{tool} not found: install the PostgreSQL client (the server's version or newer)")


def _tool(argv: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise BackupError(f"{argv[0]} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout


# ---- files ------------------------------------------------------------------------------


def _not_the_live_file(path: Path, live: Path) -> None:
    names = {Path(f"{live}{suffix}").resolve() for suffix in ("", *SIDECARS)}
    if path.resolve() in names:
        raise BackupError(f"{path} is the ledger's own database: name a file elsewhere")


def _kept_name(path: Path) -> Path:
    """``<path>.before-restore-<UTC time>``, never one a restore before kept (two in one second)."""
    base = f"{path.name}.before-restore-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    kept, n = path.with_name(base), 1
    while any(Path(f"{kept}{suffix}").exists() for suffix in ("", *SIDECARS)):
        n += 1
        kept = path.with_name(f"{base}-{n}")
    return kept


@contextlib.contextmanager
def _temporary_beside(path: Path) -> Iterator[Path]:
    """A new private (0600) file beside ``path``, on its filesystem so a rename is atomic;
    removed with any sidecar files unless renamed away."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        os.close(os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600))
    except OSError as exc:
        raise BackupError(f"cannot write beside {path}: {exc}") from exc
    try:
        yield tmp
    finally:
        for suffix in ("", *SIDECARS):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{tmp}{suffix}")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
