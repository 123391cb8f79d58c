"""What SMS and email add to a turn over the chat path, through the real processes.

    .venv/bin/python bench/channels.py [--turns 30]

Starts nats-server, the ledger, the agent, the gateway and the pollers (as ``make run`` starts
them), the OpenAI stand-in answering instantly, the Twilio REST stand-in, a pymap IMAP server
and an aiosmtpd server capturing mail. Then, --turns sequential turns per channel, each waiting
for its reply before the next:

  chat    a /chat message frame -> the assistant message of that turn on the same socket
  sms     a signed POST /sms (as Twilio sends it) -> the reply's POST to Messages.json arriving
          at the Twilio stand-in (timed by the stand-in's request handler as it arrives)
  email   IMAP APPEND of an owner mail (the pollers IDLE on the mailbox) -> the reply's DATA
          arriving at the SMTP capture (timed by the SMTP handler as it arrives)

"added latency" is each percentile of sms (email) minus the same percentile of chat.
Targets: SMS adds <= 10 ms at p50 over chat; email, with IDLE, <= 1 s at p50 from APPEND to reply.
"""

import argparse
import asyncio
import email.policy
import imaplib
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import websockets  # noqa: E402
from aiosmtpd.controller import Controller  # noqa: E402
from aiosmtpd.smtp import SMTP, Envelope, Session  # noqa: E402

from delegate.contracts import subjects  # noqa: E402
from delegate.launcher.procs import free_port  # noqa: E402
from delegate.runtime.bus import Bus  # noqa: E402
from tests.support.imap_server import PASSWORD, USER, ImapServer  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402
from tests.support.twilio_sign import twilio_signature  # noqa: E402
from tests.support.twilio_standin import TwilioStandin  # noqa: E402

OWNER_PHONE = "+15550001111"
OWNER_EMAIL = "owner@example.com"
SENDER = "delegate@mail.example.test"

TARGET_SMS_ADDED_P50 = 0.010
TARGET_EMAIL_P50 = 1.0
REPLY_TIMEOUT = 30.0


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def ms(value: float) -> str:
    return f"{value * 1000:9.2f} ms"


class TimedTwilio(TwilioStandin):
    """The Twilio stand-in, noting when each message create arrives (before it is parsed):
    the reply's arrival, not when this script got round to looking."""

    def __init__(self) -> None:
        super().__init__()
        self.create_times: list[float] = []

    def _create(self, h: BaseHTTPRequestHandler, form: Mapping[str, list[str]]) -> None:
        with self._lock:
            self.create_times.append(time.perf_counter())
        super()._create(h, form)


class TimedSmtp:
    """A real SMTP server (aiosmtpd) noting when each message's DATA arrives, and its In-Reply-To."""

    def __init__(self) -> None:
        self.port = free_port()
        self.arrived: dict[str, float] = {}  # In-Reply-To -> perf_counter at DATA
        self._lock = threading.Lock()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    def start(self) -> "TimedSmtp":
        self._controller.start()
        return self

    def stop(self) -> None:
        self._controller.stop()

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        now = time.perf_counter()
        data = (envelope.original_content or b"").replace(b"\r\n", b"\n")
        parsed = email.message_from_bytes(data, policy=email.policy.default)
        with self._lock:
            self.arrived.setdefault(str(parsed.get("In-Reply-To", "")).strip(), now)
        return "250 2.0.0 OK"

    def seen(self, message_id: str) -> float | None:
        with self._lock:
            return self.arrived.get(message_id)


async def until(read: Callable[[], float | None], what: str, timeout: float = REPLY_TIMEOUT) -> float:
    """Poll ``read`` (cheap, in-process) until it gives a time; the time was stamped at arrival,
    so the poll interval does not enter the figure."""
    deadline = time.perf_counter() + timeout
    while (value := read()) is None:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no reply within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.0005)
    return value


async def hello(conn: websockets.ClientConnection) -> None:
    await conn.send(json.dumps({"type": "hello", "after_seq": 0}))
    while json.loads(await conn.recv())["type"] != "ready":
        pass


async def chat_turns(conn: websockets.ClientConnection, n: int, tag: str) -> list[float]:
    samples = []
    for i in range(n):
        client_msg_id = f"{tag}-{i}"
        t0 = time.perf_counter()
        await conn.send(json.dumps({"type": "message", "text": f"chat {i}: say something",
                                    "client_msg_id": client_msg_id}))
        turn_id = ""
        while True:
            frame = json.loads(await asyncio.wait_for(conn.recv(), REPLY_TIMEOUT))
            event = frame.get("event") or {}
            if frame["type"] == "ack" and frame.get("client_msg_id") == client_msg_id:
                turn_id = frame["event_id"]
            elif frame["type"] == "error":
                raise RuntimeError(f"chat turn {i}: {frame}")
            elif (frame["type"] == "event" and event.get("kind") == "message" and event.get("role") == "assistant"
                  and turn_id and event.get("parent_id") == turn_id):
                samples.append(time.perf_counter() - t0)
                break
    return samples


async def sms_turns(
    system: System, twilio: TimedTwilio, queued: list[float], n: int, tag: str
) -> tuple[list[float], list[float]]:
    """Each turn's whole time, and the part from POST /sms until its reply is on CHANNELS."""
    url = system.http + "/sms"  # PUBLIC_BASE_URL is the gateway's own address here
    samples, to_queue = [], []
    async with httpx.AsyncClient() as http:
        for i in range(n):
            sid = "SM" + f"{tag}{i}".encode().hex().ljust(32, "0")[:32]
            params = {
                "MessageSid": sid, "SmsSid": sid, "SmsMessageSid": sid, "AccountSid": twilio.account_sid,
                "From": OWNER_PHONE, "To": twilio.phone_number, "Body": f"sms {i}: say something",
                "NumMedia": "0", "NumSegments": "1", "SmsStatus": "received", "ApiVersion": "2010-04-01",
            }
            headers = {"Content-Type": "application/x-www-form-urlencoded",
                       "X-Twilio-Signature": twilio_signature(twilio.auth_token, url, params)}
            before, queued_before = len(twilio.create_times), len(queued)
            t0 = time.perf_counter()
            reply = await http.post(url, content=urlencode(params), headers=headers)
            if reply.status_code != 200:
                raise RuntimeError(f"sms turn {i}: POST /sms answered {reply.status_code}: {reply.text}")
            arrived = await until(
                lambda b=before: twilio.create_times[b] if len(twilio.create_times) > b else None,  # type: ignore[misc]
                f"sms turn {i}",
            )
            samples.append(arrived - t0)
            to_queue.append(queued[queued_before] - t0)
    return samples, to_queue


def owner_mail(i: int, tag: str) -> tuple[str, bytes]:
    msg = EmailMessage()
    msg["From"] = f"Owner <{OWNER_EMAIL}>"
    msg["To"] = SENDER
    msg["Subject"] = f"{tag} {i}"
    msg["Date"] = format_datetime(datetime.now(UTC))
    msg["Message-ID"] = make_msgid(domain="example.com")
    msg.set_content(f"email {i}: say something")
    return msg["Message-ID"], msg.as_bytes()


async def email_turns(imap: ImapServer, smtp: TimedSmtp, n: int, tag: str) -> list[float]:
    client = imaplib.IMAP4(imap.host, imap.port, timeout=10)  # one session: no login in the figure
    client.login(USER, PASSWORD)
    samples = []
    try:
        for i in range(n):
            message_id, raw = owner_mail(i, tag)
            t0 = time.perf_counter()
            status, data = await asyncio.to_thread(client.append, "INBOX", None, None, raw)
            if status != "OK":
                raise RuntimeError(f"email turn {i}: APPEND failed: {data!r}")
            arrived = await until(lambda m=message_id: smtp.seen(m), f"email turn {i}")  # type: ignore[misc]
            samples.append(arrived - t0)
    finally:
        client.logout()
    return samples


async def run(args: argparse.Namespace) -> bool:
    root = Path(tempfile.mkdtemp(prefix="bench-channels-"))
    standin = StandinProcess(log_dir=root / "standin").start()
    twilio = TimedTwilio().start()
    smtp = TimedSmtp().start()
    imap = ImapServer(root / "imap.log").start()
    nats = nats_server(root / "nats", auth=True).start()
    system = System(root / "system", nats=nats)
    system.extra_env.update({
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "COMPACT_THRESHOLD": "10000000",  # this run measures the channels, not compaction
        "IDLE_SPAN_SECONDS": "100000",
        **twilio.env(owner_phone=OWNER_PHONE),
        "OWNER_EMAIL": OWNER_EMAIL,
        "PUBLIC_BASE_URL": system.http,
        **imap.env(),  # IMAP_POLL_S stays at its default: the mail must come in through IDLE
        "SMTP_HOST": "127.0.0.1", "SMTP_PORT": str(smtp.port), "SMTP_TLS": "none", "SMTP_FROM": SENDER,
    })
    bus: Bus | None = None
    try:
        system.start("ledger", "agent", "gateway", "pollers")
        assert system.nats is not None
        # The replies as they land on CHANNELS (core NATS sees every JetStream publish): the
        # agent's part of an SMS turn, the rest is the pollers' send.
        bus = await Bus.connect(system.nats.url, "bench-probe")
        queued: list[float] = []

        async def on_sms(_msg: object) -> None:
            queued.append(time.perf_counter())

        await bus.nc.subscribe(subjects.CHANNELS_SMS_OUT, cb=on_sms)
        print(f"{args.turns} sequential turns per channel (+ warm-up), stand-in answering instantly")
        async with websockets.connect(f"{system.ws}/chat?token={system.token}", max_size=None) as conn:
            await hello(conn)
            await chat_turns(conn, args.warmup, "warmup")
            chat = await chat_turns(conn, args.turns, "chat")
        await sms_turns(system, twilio, queued, args.warmup, "w")
        sms, sms_queued = await sms_turns(system, twilio, queued, args.turns, "m")
        await email_turns(imap, smtp, args.warmup, "Warm-up")
        mail = await email_turns(imap, smtp, args.turns, "Question")
    except BaseException:
        print(system.dump_logs()[-8000:], file=sys.stderr)
        raise
    finally:
        if bus is not None:
            await bus.close()
        system.stop()
        imap.stop()
        smtp.stop()
        twilio.stop()
        standin.stop()

    print()
    print(f"{'':40}{'p50':>12}{'p99':>12}{'mean':>12}")
    rows = (
        ("chat: message -> assistant message", chat),
        ("sms: POST /sms -> reply at Twilio", sms),
        ("  of which POST -> reply on CHANNELS", sms_queued),
        ("  of which CHANNELS -> Twilio (pollers)", [a - b for a, b in zip(sms, sms_queued, strict=True)]),
        ("email: APPEND -> reply at SMTP", mail),
    )
    for name, samples in rows:
        print(f"{name:40}{ms(pct(samples, 50)):>12}{ms(pct(samples, 99)):>12}{ms(statistics.fmean(samples)):>12}")
    for name, samples in (("sms", sms), ("email", mail)):
        added = [pct(samples, p) - pct(chat, p) for p in (50, 99)]
        print(f"{'added latency ' + name + ' - chat':40}{ms(added[0]):>12}{ms(added[1]):>12}")
    sms_added = pct(sms, 50) - pct(chat, 50)
    email_p50 = pct(mail, 50)
    ok_sms, ok_email = sms_added <= TARGET_SMS_ADDED_P50, email_p50 <= TARGET_EMAIL_P50
    print()
    print(f"  target: SMS added latency p50 <= {TARGET_SMS_ADDED_P50 * 1000:.0f} ms over chat: "
          f"{'PASS' if ok_sms else 'MISS'} ({sms_added * 1000:.2f} ms)")
    print(f"  target: email (IDLE) APPEND -> reply p50 <= {TARGET_EMAIL_P50:.0f} s: "
          f"{'PASS' if ok_email else 'MISS'} ({email_p50 * 1000:.0f} ms)")
    return ok_sms and ok_email


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured turns per channel first")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    sys.exit(0 if asyncio.run(run(args)) else 1)


if __name__ == "__main__":
    main()
