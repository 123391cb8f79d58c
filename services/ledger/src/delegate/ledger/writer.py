"""The ledger's writer process: validation and the database transaction, beside the bus process.

Why a second process: everything the ledger does per event is Python holding one
interpreter lock: receiving it from NATS, validating it, building its row, inserting
it, announcing it. In one process that is one core's worth of work in series, and
the ledger drained JetStream at ~25% of the rate raw inserts reach. Split in two, the
bus process (NATS, acks, announcements, queries) and this one (validation, rows, the
transaction: inserts, conversations, spans, terms, fences) each use a core, and the bus
process hands over the next batch while this one commits the last.

The ledger starts this process (``python -m delegate.ledger.writer``, never by hand)
and talks to it over its stdin and stdout, privately: frames of a 4-byte big-endian
length and a pickle. Pickle, not JSON or pydantic: both ends are this package, and
the frames carry bytes both ways: the raw events in, and out each committed event's seq
with its wire JSON, the very bytes the ledger announces (``Announcement``), which pickle
moves at a fraction of a microsecond each. The JSON is written here, not in the bus
process: that costs this process less than pickling the rows' fields did (a datetime
each), and the bus process nothing but the publish.

  request   (number, [raw event bytes, ...], [producer, ...], announced_through | None)
  reply     (number, committed [(seq, wire JSON bytes)], refused [(index, reason)],
             announced_saved, unavailable reason | None)

The writer never acks anything: the bus process acks a batch after its reply, so a
crash of either process leaves the batch unacked and JetStream delivers it again;
the idempotent append absorbs what was committed already. The writer exits when its
stdin closes, after answering what it was given.
"""

import asyncio
import contextlib
import logging
import os
import pickle
import signal
import struct
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from pydantic import ValidationError

from delegate.contracts.events import Fence, Singleton
from delegate.runtime.exits import exit_now
from delegate.runtime.logs import configure_logging
from delegate.runtime.validation import describe  # not the bus package: this process never uses NATS

from .store import LedgerStore, StoreUnavailable, open_store
from .store.base import Row, StoredEvent

if TYPE_CHECKING:  # the bus process's: the writer process reads WriterSettings
    from .settings import Settings

log = logging.getLogger(__name__)

MODULE = "delegate.ledger.writer"
_LENGTH = struct.Struct(">I")
FRAME_MAX = 1 << 30  # far above any batch (256 events of at most 256 KiB); a bigger length is corruption
# Seconds a batch may take; SQLite's busy timeout is 5 s, a commit far less. Longer than the
# consumer's ack_wait by design: the ledger sends in_progress for the batch meanwhile.
REPLY_TIMEOUT = 120.0
READ_LIMIT = 1 << 20  # StreamReader buffer: frames are read with readexactly, not by line
# How refusals of the fence rules begin (the ledger counts them by these; FENCED is the store's).
FOREIGN = "fence from another identity"
UNFENCED = "unfenced"
SINGLETONS = frozenset(get_args(Singleton))  # producers whose every event must be fenced

# A committed event as ``ledger.live.committed`` carries it: (seq, its wire JSON, ``StoredEvent.json``).
Announcement = tuple[int, bytes]


def announcements(rows: Iterable[StoredEvent]) -> list[Announcement]:
    return [(row.seq, row.json().encode()) for row in rows]


@dataclass
class WriteResult:
    committed: list[Announcement] = field(default_factory=list)  # in seq order
    refused: list[tuple[int, str]] = field(default_factory=list)  # (index in the request, why)
    announced_saved: bool = False  # announced_through is recorded in a committed transaction
    unavailable: str | None = None  # the database is down or busy: nothing after ``committed`` was tried


class WriterLost(Exception):
    """The writer process ended before answering: the batch is in an unknown state (retry it)."""


def _frame(obj: Any) -> bytes:
    body = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return _LENGTH.pack(len(body)) + body


async def _read_frame(reader: asyncio.StreamReader) -> Any:
    """The next frame's object; None at a clean end of the stream."""
    try:
        head = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise WriterLost("the stream ended inside a frame header") from exc
        return None
    (size,) = _LENGTH.unpack(head)
    if size > FRAME_MAX:
        raise WriterLost(f"frame of {size} bytes: the stream is corrupt")
    return pickle.loads(await reader.readexactly(size))


# ---- the bus process's side -------------------------------------------------------------


def writer_env(settings: "Settings", store: LedgerStore) -> dict[str, str]:
    """The writer's environment: this process's, with the store settings as resolved here
    (they may have come from code or a .env file, not the environment). No NATS identity: the
    writer never connects, and a host process (``delegate.host``) holds several."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NATS_PASSWORD")}
    env["RUNTIME_DATA_DIR"] = str(settings.runtime_data_dir.resolve())
    env["LOG_LEVEL"] = settings.log_level
    env["INSTANCE_NAME"] = settings.instance_name
    env.pop("DATABASE_URL", None)
    env.pop("SQLITE_JOURNAL_MODE", None)
    if settings.database_url:
        env["DATABASE_URL"] = settings.database_url
    journal_mode = getattr(store, "journal_mode", None)  # SQLite: the mode chosen (or detected) here
    if journal_mode:
        env["SQLITE_JOURNAL_MODE"] = journal_mode
    return env


@dataclass(frozen=True)
class WriterSettings:
    """What the writer process reads: the values ``writer_env`` puts in its environment, as the
    ledger resolved them. Not ``Settings``: its base (pydantic-settings, the NATS identity, the
    role table and every topic) was a fifth of this process's start, for five plain values."""

    database_url: str | None
    sqlite_journal_mode: str | None
    runtime_data_dir: Path
    log_level: str
    instance_name: str

    @classmethod
    def from_environ(cls, environ: dict[str, str] | None = None) -> "WriterSettings":
        env = os.environ if environ is None else environ
        return cls(
            database_url=env.get("DATABASE_URL", "").strip() or None,
            sqlite_journal_mode=env.get("SQLITE_JOURNAL_MODE", "").strip().upper() or None,
            runtime_data_dir=Path(env.get("RUNTIME_DATA_DIR", "./runtime-data")),
            log_level=env.get("LOG_LEVEL", "INFO"),
            instance_name=env.get("INSTANCE_NAME", ""),
        )


class WriterProcess:
    """Starts the writer process, sends it batches, and starts it again when it has died.

    ``append`` calls may overlap (the ledger runs its consumer two batches deep); the
    writer answers them in the order they were sent. ``restarts`` counts the starts after
    the first: the ledger re-announces what a writer that died may have committed without
    reporting it.
    """

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self.env = env
        self.restarts = 0
        self._started = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._waiting: dict[int, asyncio.Future[WriteResult]] = {}  # of the current process
        self._number = 0
        self._lock = asyncio.Lock()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> None:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", MODULE,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            env=self.env, limit=READ_LIMIT,
            # Its own process group: a Ctrl-C in a terminal reaches the ledger, which then
            # closes the writer's stdin; the writer must not die in the middle of a batch.
            start_new_session=True,
        )
        self._proc = proc
        self._waiting = {}  # the previous process's reader fails what it still had, not these
        if self._started:
            self.restarts += 1
        self._started += 1
        self._reader = asyncio.ensure_future(self._read_replies(proc, self._waiting))
        log.info("writer process %d started", proc.pid)

    async def ensure_running(self) -> None:
        async with self._lock:
            if not self.alive():
                await self.start()

    async def append(
        self, raws: Sequence[bytes], producers: Sequence[str], announced_through: int | None
    ) -> WriteResult:
        """Send a batch (each event with its producer: the last token of its subject) and wait
        for its result. Calls may overlap: the writer answers them in the order they were sent
        (calls that reach this lock in order are sent in order)."""
        async with self._lock:
            if not self.alive():
                await self.start()
            proc = self._proc
            assert proc is not None and proc.stdin is not None
            self._number += 1
            number = self._number
            answer: asyncio.Future[WriteResult] = asyncio.get_running_loop().create_future()
            self._waiting[number] = answer
            try:
                proc.stdin.write(_frame((number, list(raws), list(producers), announced_through)))
                await proc.stdin.drain()
            except (ConnectionError, RuntimeError) as exc:
                self._waiting.pop(number, None)
                raise WriterLost(f"cannot send to the writer process: {exc!r}") from exc
        try:
            return await asyncio.wait_for(answer, REPLY_TIMEOUT)
        except TimeoutError:
            # Stuck (a bug, or the database hung beyond any busy timeout): replace it. The
            # batch is not acked, so it is delivered again; the append is idempotent.
            log.error("writer process %s did not answer in %.0fs: killing it", proc.pid, REPLY_TIMEOUT)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            raise WriterLost(f"no answer in {REPLY_TIMEOUT:.0f}s") from None

    async def _read_replies(
        self, proc: asyncio.subprocess.Process, waiting: dict[int, asyncio.Future[WriteResult]]
    ) -> None:
        assert proc.stdout is not None
        why = "the writer process closed its output"
        try:
            while True:
                reply = await _read_frame(proc.stdout)
                if reply is None:
                    break
                number, committed, refused, announced_saved, unavailable = reply
                answer = waiting.pop(number, None)
                if answer is not None and not answer.done():
                    answer.set_result(WriteResult(committed, refused, announced_saved, unavailable))
        except Exception as exc:  # a torn frame: the process is going or gone
            why = f"reading from the writer process failed: {exc!r}"
        code = await proc.wait()
        log.warning("writer process %d ended (exit code %s): %s", proc.pid, code, why)
        for answer in waiting.values():
            if not answer.done():
                answer.set_exception(WriterLost(f"the writer process ended (exit code {code}) before answering"))
        waiting.clear()

    async def close(self, timeout: float = 10.0) -> None:
        """Close its stdin (it answers what it has, then exits); kill it if it does not."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout)
        except TimeoutError:
            log.warning("writer process %d did not exit in %.0fs: killing it", proc.pid, timeout)
            proc.kill()
            await proc.wait()
        if self._reader is not None:
            await self._reader


# ---- the writer process ---------------------------------------------------------------------

def rows_of(
    raws: Sequence[bytes], producers: Sequence[str]
) -> tuple[list[Row], list[Fence | None], list[int], list[tuple[int, str]]]:
    """Validate each raw event: (rows, their fences, their indexes in ``raws``, refused (index, why)).

    Who may fence is decided here, from the subject alone (NATS lets each identity publish
    only its own ``ledger.evt.append.<producer>``): a fenced event must come from its
    singleton's own subject, and everything on a singleton's subject must be fenced, or a
    deposed leader could write past the fence by leaving it off. The token itself is judged
    in the transaction (``store.commit_rules.judge_fences``).
    """
    # The writer process's: ``run`` imports it at its start. The bus process (which imports this
    # module for ``WriterProcess``) never validates, so it does not build these validators
    # (~0.08 s of CPU on every start of the ledger).
    from .rows import parse

    rows: list[Row] = []
    fences: list[Fence | None] = []
    indexes: list[int] = []
    refused: list[tuple[int, str]] = []
    for i, (raw, producer) in enumerate(zip(raws, producers, strict=True)):
        try:
            row, fence = parse(raw)
        except ValidationError as exc:
            refused.append((i, f"undecodable: {describe(exc)}"))
            continue
        except ValueError as exc:  # valid, but not storable as strict JSON (a NaN in a payload)
            refused.append((i, f"unstorable: {exc}"))
            continue
        if fence is not None and fence.singleton != producer:
            refused.append((i, f"{FOREIGN}: {producer!r} published event {row[0]} fenced as {fence.singleton!r}"))
            continue
        if fence is None and producer in SINGLETONS:
            refused.append((i, f"{UNFENCED}: event {row[0]} on the {producer} singleton's subject carries no fence"))
            continue
        rows.append(row)
        fences.append(fence)
        indexes.append(i)
    return rows, fences, indexes, refused


async def write(
    store: LedgerStore, rows: list[Row], fences: list[Fence | None], indexes: list[int], announced: int | None
) -> WriteResult:
    """One transaction for the batch; if the database refuses it, find the row(s) it refuses."""
    result = WriteResult()
    try:
        written = await store.write(rows, fences=fences, announced_through=announced)
        result.committed = announcements(written.committed)
        result.refused = [(indexes[i], why) for i, why in written.refused]
        result.announced_saved = announced is not None
        return result
    except StoreUnavailable as exc:
        result.unavailable = str(exc)
        return result
    except Exception as exc:
        log.warning("batch of %d refused (%r); storing its events one by one", len(rows), exc)
    for i, row, fence in zip(indexes, rows, fences, strict=True):
        try:
            written = await store.write([row], fences=[fence], announced_through=announced)
        except StoreUnavailable as exc:
            result.unavailable = str(exc)  # what is committed must still be announced: return it
            return result
        except Exception as exc:
            result.refused.append((i, f"the store refused event {row[0]}: {exc!r}"))
            continue
        result.committed += announcements(written.committed)
        result.refused += [(i, why) for _, why in written.refused]
        if announced is not None:
            result.announced_saved, announced = True, None
    return result


async def serve(store: LedgerStore, reader: asyncio.StreamReader, out: asyncio.StreamWriter) -> None:
    """Answer requests, in order, until the input ends. Reading the next request overlaps this
    one's commit (the fsync): a request sent meanwhile is validated by the time it is done."""
    received: asyncio.Queue[Any] = asyncio.Queue(maxsize=2)

    async def receive() -> None:
        try:
            while (request := await _read_frame(reader)) is not None:
                number, raws, producers, announced = request
                rows, fences, indexes, refused = rows_of(raws, producers)
                await received.put((number, rows, fences, indexes, refused, announced))
        except WriterLost as exc:  # the ledger died mid-frame: nothing to answer it with
            log.warning("input ended: %s", exc)
        except Exception:  # a bug: exit, so the ledger sees it and starts another writer
            log.exception("reading requests failed")
        await received.put(None)

    receiving = asyncio.ensure_future(receive())
    try:
        while (item := await received.get()) is not None:
            number, rows, fences, indexes, refused, announced = item
            result = await write(store, rows, fences, indexes, announced)
            out.write(_frame((
                number, result.committed, sorted(refused + result.refused), result.announced_saved, result.unavailable,
            )))
            await out.drain()
    finally:
        receiving.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await receiving


async def _main(settings: WriterSettings) -> None:
    loop = asyncio.get_running_loop()
    # Replies go out on a private copy of stdout; fd 1 itself now points at stderr, so a
    # stray print from any library cannot corrupt the frames.
    out_fd = os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    reader = asyncio.StreamReader(limit=READ_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(
        asyncio.streams.FlowControlMixin, os.fdopen(out_fd, "wb", buffering=0)
    )
    out = asyncio.StreamWriter(transport, protocol, None, loop)
    store = open_store(
        database_url=settings.database_url,
        runtime_data_dir=settings.runtime_data_dir,
        sqlite_journal_mode=settings.sqlite_journal_mode,
    )
    await store.open()  # the ledger opened it first: migrations are done, the database is there
    try:
        await serve(store, reader, out)
    finally:
        await store.close()
        transport.close()


def run() -> None:
    import uvloop

    from . import rows  # noqa: F401  # its validators, built before the first batch comes

    settings = WriterSettings.from_environ()
    configure_logging((settings.instance_name or "ledger") + "-writer", settings.log_level)
    # Stopping is the ledger's call: it closes our stdin, and we exit after answering.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_main(settings))
        # Everything is answered, committed and closed by now; the interpreter's teardown of what
        # it imported (the contracts, every kind's validators) took 0.1-0.2 s of CPU, 0.4-2 s on
        # a loaded machine, and the ledger's stop (a host's, every test System's) waits for it.
        exit_now(0)


if __name__ == "__main__":
    run()
