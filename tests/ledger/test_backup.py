"""``python -m delegate.ledger backup|restore``, run as the operator runs them.

SQLite: a real nats-server and the ledger as its own process, taking events in flight while
the backup is taken; the ledger stopped, the backup restored, the ledger started again: every
event committed before the backup began is back with its seq. Damaged backups are refused
with the live database untouched, and so is a restore while the ledger runs. PostgreSQL:
pg_dump of a ledger database, restored into another, compared event by event.
"""

import asyncio
import contextlib
import hashlib
import os
import sqlite3
import stat
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.ledger.store import sqlite_path
from delegate.ledger.store.postgres import PostgresStore
from delegate.ledger.store.sqlite import SqliteStore
from delegate.runtime.bus import Bus
from tests.support.postgres import PrivatePostgres
from tests.support.system import System
from tests.support.waiting import eventually

from .builders import message, span_opened

pytestmark = [pytest.mark.integration]


def _events(start: int, n: int) -> list[Event]:
    return [span_opened(f"span-{i // 50}") if i % 50 == 0 else message(f"m{i}", span=f"span-{i // 50}")
            for i in range(start, start + n)]


async def _cli(env: dict[str, str], cwd: Path, *args: str) -> tuple[int, str, str]:
    """The command as its own process, as an operator (or cron) runs it."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "delegate.ledger", *args, env=env, cwd=cwd,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def _read_only(live: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{live}?mode=ro", uri=True, timeout=5)


def _max_seq(live: Path) -> int:
    try:
        with contextlib.closing(_read_only(live)) as conn:  # sqlite3's own `with` commits, never closes
            return int(conn.execute("SELECT COALESCE(MAX(seq), 0) FROM conversation_events").fetchone()[0])
    except sqlite3.OperationalError:  # not created yet
        return 0


def _rows(db: Path) -> dict[str, int]:
    conn = _read_only(db)
    try:
        return dict(conn.execute("SELECT id, seq FROM conversation_events").fetchall())
    finally:
        conn.close()


def _files(folder: Path) -> dict[str, str]:
    """Every file in ``folder`` and a hash of its bytes: what "untouched" means."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


async def _produce(bus: Bus, acked: list[str], stop: asyncio.Event) -> None:
    """A busy producer: 200 events in flight at a time until told to stop."""
    start = 0
    while not stop.is_set():
        chunk = _events(start, 200)
        await asyncio.gather(*(bus.publish(topics.ledger_append("test"), e, deadline=60) for e in chunk))
        acked.extend(e.id for e in chunk)  # JetStream acknowledged each of them
        start += len(chunk)


async def _all_events(bus: Bus) -> list[Event]:
    events: list[Event] = []
    while True:
        reply = await bus.request(topics.LEDGER_QUERY, QueryRequest(after_seq=events[-1].seq if events else 0,
                                                                    limit=5000), timeout=10)
        events.extend(reply.events)
        if not reply.more:
            return events


@pytest.fixture
async def running(system: System) -> AsyncIterator[Bus]:
    await asyncio.to_thread(system.start, "ledger", separate=("ledger",))
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "backup-test")
    yield bus
    await bus.close()


def _cli_env(system: System) -> dict[str, str]:
    env = {**system.env}
    env.pop("DATABASE_URL", None)
    return env


@pytest.mark.slow
async def test_a_backup_taken_mid_burst_restores_every_event_committed_before_it(
    system: System, running: Bus, tmp_path: Path
) -> None:
    live, env, backup_file = sqlite_path(system.runtime), _cli_env(system), tmp_path / "backups" / "ledger.sqlite"
    backup_file.parent.mkdir()
    acked: list[str] = []
    stop = asyncio.Event()
    producing = asyncio.create_task(_produce(running, acked, stop))
    await eventually(lambda: _max_seq(live) >= 1000, "the ledger writing", 30)
    # Before the backup starts: what JetStream acknowledged and the ledger committed.
    acked_then = set(acked)
    before = {i: seq for i, seq in _rows(live).items() if i in acked_then}
    assert before
    try:
        code, out, err = await _cli(env, tmp_path, "backup", str(backup_file))
        assert not producing.done()  # the burst went on through the whole backup
        committed_by_then = _max_seq(live)
        writing = committed_by_then > max(before.values())  # the ledger kept committing meanwhile
    finally:
        stop.set()
        await producing
    assert code == 0, err
    assert out.startswith(f"backup {backup_file}: ") and "events, last seq" in out, out
    assert stat.S_IMODE(backup_file.stat().st_mode) == 0o600
    assert [p.name for p in backup_file.parent.iterdir()] == ["ledger.sqlite"]  # no temp file left
    in_backup = _rows(backup_file)
    assert f"{len(in_backup)} events, last seq {max(in_backup.values())}," in out, out
    # One snapshot, taken while the ledger went on committing: all of what came before it,
    # seqs without a gap.
    assert writing
    assert max(before.values()) <= max(in_backup.values()) <= committed_by_then
    assert sorted(in_backup.values()) == list(range(1, len(in_backup) + 1))

    # The ledger still has its database open: a restore is refused and changes nothing.
    code, _, err = await _cli(env, tmp_path, "restore", str(backup_file))
    assert code != 0 and "stop the ledger first" in err, err
    assert not list(live.parent.glob("*before-restore*"))

    assert await asyncio.to_thread(system.procs["ledger"].stop, 15.0) == 0
    replaced = _rows(live)
    assert len(replaced) > len(in_backup)
    code, out, err = await _cli(env, tmp_path, "restore", str(backup_file))
    assert code == 0, err
    assert out.startswith(f"restore {backup_file}: {len(in_backup)} events"), out
    kept = [p for p in live.parent.iterdir() if p.name.startswith(f"{live.name}.before-restore-")]
    assert kept and _rows(min(kept, key=lambda p: len(p.name))) == replaced  # with its WAL, whole

    system.procs["ledger"].start()
    await asyncio.to_thread(system.wait_ready, ["ledger"])
    answered = {e.id: e.seq for e in await _all_events(running)}
    for event_id, seq in before.items():
        assert answered.get(event_id) == seq, event_id
    # In order: seq order of the backup is the order they were committed in.
    assert sorted(before, key=before.__getitem__) == [i for i in answered if i in before]


@pytest.fixture
async def ledger_db(tmp_path: Path) -> Path:
    """A ledger's SQLite database written by the store itself; the ledger is not running."""
    runtime = tmp_path / "runtime-data"
    store = SqliteStore(sqlite_path(runtime))
    await store.open()
    await store.append(_events(0, 300))
    await store.close()
    return runtime


def _damage_truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def _damage_overwritten(path: Path) -> None:
    with path.open("r+b") as f:
        f.seek(path.stat().st_size // 3)
        f.write(b"not a database page" * 400)


@pytest.mark.parametrize("damage", [_damage_truncated, _damage_overwritten])
async def test_a_damaged_backup_is_refused_and_the_live_database_left_as_it_was(
    ledger_db: Path, tmp_path: Path, damage: object
) -> None:
    env = {**os.environ, "RUNTIME_DATA_DIR": str(ledger_db)}
    env.pop("DATABASE_URL", None)
    backup_file = tmp_path / "ledger.backup"
    code, _, err = await _cli(env, tmp_path, "backup", str(backup_file))
    assert code == 0, err
    assert callable(damage)
    damage(backup_file)
    live_files = _files(sqlite_path(ledger_db).parent)
    code, out, err = await _cli(env, tmp_path, "restore", str(backup_file))
    assert code != 0 and out == "" and "restore refused" in err, (out, err)
    assert _files(sqlite_path(ledger_db).parent) == live_files


async def test_a_restore_is_refused_while_a_writer_holds_the_database(ledger_db: Path, tmp_path: Path) -> None:
    """Under the DELETE journal there is no -shm to tell an open ledger by: a write in
    progress (a held write lock) is what is left to tell."""
    env = {**os.environ, "RUNTIME_DATA_DIR": str(ledger_db)}
    env.pop("DATABASE_URL", None)
    backup_file = tmp_path / "ledger.backup"
    code, _, err = await _cli(env, tmp_path, "backup", str(backup_file))
    assert code == 0, err
    live = sqlite_path(ledger_db)
    with contextlib.closing(sqlite3.connect(live, isolation_level=None)) as conn:
        assert conn.execute("PRAGMA journal_mode = DELETE").fetchone() == ("delete",)
    # Read before the writer connects: closing any descriptor of the file in this process
    # would drop the POSIX lock the writer holds (SQLite's locks are per process).
    live_files = _files(live.parent)
    writer = sqlite3.connect(live, isolation_level=None)
    try:
        writer.execute("BEGIN IMMEDIATE")
        code, _, err = await _cli(env, tmp_path, "restore", str(backup_file))
        writer.execute("ROLLBACK")
    finally:
        writer.close()
    assert code != 0 and "locked for writing" in err and "stop the ledger first" in err, err
    assert _files(live.parent) == live_files
    code, _, err = await _cli(env, tmp_path, "restore", str(backup_file))
    assert code == 0, err


async def test_a_damaged_live_database_is_replaced_and_kept_aside(ledger_db: Path, tmp_path: Path) -> None:
    env = {**os.environ, "RUNTIME_DATA_DIR": str(ledger_db)}
    env.pop("DATABASE_URL", None)
    backup_file = tmp_path / "ledger.backup"
    code, _, err = await _cli(env, tmp_path, "backup", str(backup_file))
    assert code == 0, err
    live = sqlite_path(ledger_db)
    for sidecar in live.parent.glob(f"{live.name}-*"):
        sidecar.unlink()
    live.write_bytes(b"the disk ate it" * 1000)
    code, out, err = await _cli(env, tmp_path, "restore", str(backup_file))
    assert code == 0, err
    assert out.startswith(f"restore {backup_file}: 300 events, last seq 300"), out
    assert len(_rows(live)) == 300
    [kept] = live.parent.glob(f"{live.name}.before-restore-*")
    assert kept.read_bytes() == b"the disk ate it" * 1000


async def test_a_backup_never_overwrites_the_live_database(ledger_db: Path, tmp_path: Path) -> None:
    env = {**os.environ, "RUNTIME_DATA_DIR": str(ledger_db)}
    env.pop("DATABASE_URL", None)
    live = sqlite_path(ledger_db)
    live_files = _files(live.parent)
    code, _, err = await _cli(env, tmp_path, "backup", str(live))
    assert code != 0 and "the ledger's own database" in err, err
    assert _files(live.parent) == live_files


# ---- PostgreSQL ------------------------------------------------------------------------


@pytest.fixture
def fresh_databases(postgres: PrivatePostgres) -> Iterator[tuple[str, str]]:
    urls = (postgres.create_database(), postgres.create_database())
    yield urls
    for url in urls:
        postgres.drop_database(url)


def _pg_events(url: str) -> tuple[int, str]:
    """How many events, and a hash of all of them in seq order."""
    digest = hashlib.sha256()
    with psycopg.connect(url) as conn:
        rows = conn.execute("SELECT seq, id, ts, kind, span_id, payload::text FROM conversation_events ORDER BY seq")
        count = 0
        for row in rows:
            digest.update(repr(row).encode())
            count += 1
    return count, digest.hexdigest()


async def test_postgres_backup_with_pg_dump_restores_into_another_database(
    fresh_databases: tuple[str, str], tmp_path: Path
) -> None:
    source, target = fresh_databases
    store = PostgresStore(source, max_size=2)
    await store.open()
    await store.append(_events(0, 300))
    await store.close()
    dump = tmp_path / "ledger.dump"
    env = PrivatePostgres.tools_env(
        {**os.environ, "RUNTIME_DATA_DIR": str(tmp_path / "runtime-data"), "DATABASE_URL": source})
    code, out, err = await _cli(env, tmp_path, "backup", str(dump))
    assert code == 0, err
    assert out.startswith(f"backup {dump}: 300 events, last seq 300"), out
    assert stat.S_IMODE(dump.stat().st_mode) == 0o600

    # A dump cut short lists fine (its table of contents comes first) but cannot be restored:
    # in one transaction, so the target is as it was.
    broken = tmp_path / "broken.dump"
    broken.write_bytes(dump.read_bytes()[: dump.stat().st_size * 2 // 3])
    env["DATABASE_URL"] = target
    code, _, err = await _cli(env, tmp_path, "restore", str(broken))
    assert code != 0 and "restore refused" in err, err
    with psycopg.connect(target) as conn:
        assert conn.execute("SELECT to_regclass('conversation_events')").fetchone() == (None,)

    # Someone (a ledger) is connected to the target: refused.
    with psycopg.connect(target):
        code, _, err = await _cli(env, tmp_path, "restore", str(dump))
    assert code != 0 and "stop the ledger first" in err, err

    code, out, err = await _cli(env, tmp_path, "restore", str(dump))
    assert code == 0, err
    assert out.startswith(f"restore {dump}: 300 events, last seq 300"), out
    assert _pg_events(target) == _pg_events(source)
