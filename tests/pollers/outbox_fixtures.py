"""Outbox tests' rig: nats-server and the ledger as real processes, the Twilio REST stand-in,
an aiosmtpd server capturing mail, and the outbox running either in this process (as the
pollers' NATS identity) or in a runner subprocess that a test may SIGKILL.

A test module imports ``outbox_fixture`` (and ``smtp_fixture``, ``twilio_fixture``, which it
needs) and asks for ``outbox`` (an ``OutboxRig``), ``twilio`` or ``smtp``.
"""

import asyncio
import email
import email.policy
import os
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from email.message import EmailMessage
from pathlib import Path
from typing import Any, Self

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from delegate.contracts import topics
from delegate.contracts.channels import MediaFetch, OutboundEmail, OutboundSms
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.launcher.procs import ManagedProcess, free_port
from delegate.pollers.health import Health
from delegate.pollers.outbox import run_outbox
from delegate.pollers.settings import Settings
from delegate.runtime.bus import Bus
from tests.support.nats import role_env, role_url
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
OWNER_PHONE = "+15550001111"
OWNER_EMAIL = "owner@example.com"
SENDER = "delegate@mail.example.test"
PUBLIC = "https://delegate.example.test"


@dataclass
class Captured:
    mail_from: str
    rcpt_tos: list[str]
    data: bytes

    @property
    def message(self) -> EmailMessage:
        # the wire's CRLF line ends, as a mail client's parser sees them: as line ends
        parsed = email.message_from_bytes(self.data.replace(b"\r\n", b"\n"), policy=email.policy.default)
        assert isinstance(parsed, EmailMessage)
        return parsed


class SmtpCapture:
    """A real SMTP server (aiosmtpd) on 127.0.0.1 that records what it accepts.

    ``reply_next("451 4.3.0 try later")`` answers the next DATA with that instead of
    accepting; ``hold_data(seconds)`` accepts the next message but waits before answering
    (the sender killed then cannot know that it arrived)."""

    def __init__(self) -> None:
        self.messages: list[Captured] = []
        self.data_started = threading.Event()
        self._replies: list[str] = []
        self._hold: float | None = None
        self._released = threading.Event()
        self._lock = threading.Lock()
        self.port = free_port()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    def start(self) -> Self:
        self._controller.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._controller.stop()

    def reply_next(self, *replies: str) -> None:
        with self._lock:
            self._replies.extend(replies)

    def hold_data(self, seconds: float) -> None:
        with self._lock:
            self._hold = seconds

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.data_started.set()
        with self._lock:
            hold, self._hold = self._hold, None
            reply = self._replies.pop(0) if self._replies else None
        if reply is None:
            data = envelope.original_content or b""
            with self._lock:
                self.messages.append(Captured(str(envelope.mail_from), list(envelope.rcpt_tos), data))
        if hold is not None:  # accepted, but the answer comes late: the sender cannot know
            await asyncio.get_running_loop().run_in_executor(None, self._released.wait, hold)
        return reply or "250 2.0.0 OK"


class OutboxRig:
    def __init__(self, system: System, bus: Bus, twilio: TwilioStandin, smtp: SmtpCapture) -> None:
        self.system, self.bus, self.twilio, self.smtp = system, bus, twilio, smtp
        self._running: list[tuple[asyncio.Event, asyncio.Task[None], Bus]] = []
        self.runners: list[ManagedProcess] = []

    def values(self, **overrides: Any) -> dict[str, Any]:
        values: dict[str, Any] = {
            "twilio_account_sid": self.twilio.account_sid, "twilio_auth_token": self.twilio.auth_token,
            "twilio_phone_number": self.twilio.phone_number, "twilio_api_base_url": self.twilio.url,
            "owner_phone": OWNER_PHONE, "owner_email": OWNER_EMAIL, "public_base_url": PUBLIC,
            "smtp_host": "127.0.0.1", "smtp_port": self.smtp.port, "smtp_tls": "none", "smtp_from": SENDER,
            "outbox_backoff_s": 0.05, "outbox_backoff_max_s": 0.2, "outbox_ack_wait_s": 2.0,
            "outbox_http_timeout_s": 5.0, "runtime_data_dir": self.system.runtime,
        }
        values.update(overrides)
        return values

    def settings(self, **overrides: Any) -> Settings:
        return Settings(**self.values(**overrides))

    async def start(self, **overrides: Any) -> Health:
        """The outbox in this process, as the pollers' own NATS identity; returns once running."""
        assert self.system.nats is not None
        bus = await Bus.connect(role_url(self.system.nats, "pollers"), "pollers:test")
        await bus.ensure_streams()  # CHANNELS, as the pollers create it
        stop, health = asyncio.Event(), Health()
        task = asyncio.create_task(run_outbox(bus, self.settings(**overrides), health, stop))
        self._running.append((stop, task, bus))
        await self.until("the outbox consumers", lambda: _now(health.running), timeout=20)
        return health

    async def stop_outboxes(self) -> None:
        for stop, task, bus in self._running:
            stop.set()
            await asyncio.wait_for(task, 30)
            await bus.close()
        self._running.clear()

    def start_runner(self, **overrides: Any) -> ManagedProcess:
        """The outbox in a process of its own (tests/pollers/outbox_runner.py), to kill."""
        assert self.system.nats is not None
        env = {**self.system.env, **role_env(self.system.nats, "pollers"), "PYTHONPATH": str(ROOT)}
        for key, value in self.values(**overrides).items():
            env[key.upper()] = str(value)
        n = len(self.runners) + 1
        proc = ManagedProcess(f"outbox-runner-{n}", [sys.executable, "-m", "tests.pollers.outbox_runner"], env,
                              self.system.logs / f"outbox-runner.{n}.log")
        self.runners.append(proc.start())
        return proc

    def runner_logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.log_text()[-4000:]}" for p in self.runners)

    async def consumer_exists(self, durable: str) -> bool:
        try:
            await self.bus.js.consumer_info("CHANNELS", durable)
            return True
        except Exception:  # not created yet
            return False

    async def send(self, msg: OutboundSms | OutboundEmail | MediaFetch) -> None:
        if isinstance(msg, OutboundSms):
            await self.bus.publish(topics.SMS_OUT, msg, msg_id=msg.id)
        elif isinstance(msg, OutboundEmail):
            await self.bus.publish(topics.EMAIL_OUT, msg, msg_id=msg.id)
        else:
            await self.bus.publish(topics.MEDIA_FETCH, msg, msg_id=msg.id)

    async def events(self, kind: str) -> list[Event]:
        reply = await self.bus.request(topics.LEDGER_QUERY, QueryRequest(kinds=[kind], limit=5000), timeout=10)
        return reply.events

    async def deliveries(self, outbox_id: str) -> list[Event]:
        return [e for e in await self.events("delivery") if e.payload.get("outbox_id") == outbox_id]

    async def statuses(self, outbox_id: str) -> list[str]:
        return [str(e.payload["status"]) for e in await self.deliveries(outbox_id)]

    async def outcome(self, outbox_id: str, timeout: float = 20.0) -> Event:
        """The sender's final record (sent, failed, unknown), waited for."""
        found: list[Event] = []

        async def done() -> bool:
            found[:] = [e for e in await self.deliveries(outbox_id) if e.payload.get("final")]
            return bool(found)

        await self.until(f"the outcome of {outbox_id}", done, timeout)
        return found[0]

    async def until(self, what: str, check: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
        """``eventually``, with the services' and the runner's log tails in the failure."""
        await eventually(check, what, timeout,
                         explain=lambda: f"{self.system.dump_logs()[-3000:]}\n{self.runner_logs()}")


async def _now(value: bool) -> bool:
    return value


@pytest.fixture(name="twilio")
def twilio_fixture() -> Iterator[TwilioStandin]:
    standin = TwilioStandin().start()
    yield standin
    standin.stop()


@pytest.fixture(name="smtp")
def smtp_fixture() -> Iterator[SmtpCapture]:
    capture = SmtpCapture().start()
    yield capture
    capture.stop()


@pytest.fixture(name="outbox")
async def outbox_fixture(tmp_path: Path, twilio: TwilioStandin, smtp: SmtpCapture) -> AsyncIterator[OutboxRig]:
    os.environ.pop("TWILIO_REGION", None)  # the SDK would rewrite the stand-in's host with them
    os.environ.pop("TWILIO_EDGE", None)
    system = System(tmp_path)
    system.start("ledger")
    assert system.nats is not None
    bus = await Bus.connect(system.nats.url, "test")
    await bus.ensure_streams(all_owners=True)
    rig = OutboxRig(system, bus, twilio, smtp)
    try:
        yield rig
    finally:
        await rig.stop_outboxes()
        for proc in rig.runners:
            proc.stop()
        await bus.close()
        system.stop()
