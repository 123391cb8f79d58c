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

Then the gateway's webhook spool (``--spool-only`` runs just this part), on a system of its own:
nats-server and two gateway processes, one with the spool (the default) and one with
GATEWAY_SPOOL=false (the direct publish the spool replaced), no agent (the inputs stay on AGENT):

  answer  signed POST /sms -> its 200, --spool-samples per gateway, the two alternating
  stored  signed POST /sms -> the input published on AGENT (seen by a core subscription)
  drain   NATS stopped, --outage signed SMS posted (each must be answered 200), NATS started:
          the rate at which the spool is drained, from JetStream's own timestamps of the first
          and last stored input; the floor is this script publishing the same inputs to the same
          stream one at a time, each waiting for its ack, right after

Targets: the spool adds <= 5 ms to the /sms answer at p50 and p99 over the direct publish;
the drain after an outage runs at >= 200 SMS/s.
"""

import argparse
import asyncio
import email.policy
import imaplib
import json
import logging
import secrets
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
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import websockets  # noqa: E402
from aiosmtpd.controller import Controller  # noqa: E402
from aiosmtpd.smtp import SMTP, Envelope, Session  # noqa: E402

from delegate.contracts import subjects, topics  # noqa: E402
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
TARGET_SPOOL_ADDED = 0.005  # at p50 and p99
TARGET_DRAIN_RATE = 200.0
SPOOL_PUBLIC = "https://bench.example.test"
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
            # The stand-in stamps in its own thread: the CHANNELS message may still be on its way
            # to this loop's subscription when the create has arrived.
            on_channels = await until(
                lambda q=queued_before: queued[q] if len(queued) > q else None,  # type: ignore[misc]
                f"sms turn {i} on CHANNELS",
            )
            samples.append(arrived - t0)
            to_queue.append(on_channels - t0)
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
    twilio = TimedTwilio()
    twilio.start()
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
        system.start("ledger", "agent", "gateway", "pollers", separate=True)
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


# ---- the webhook spool ---------------------------------------------------------------------------


class SpoolBench:
    """nats-server and two gateways, spool on and off; signs every webhook as Twilio does."""

    def __init__(self, root: Path) -> None:
        self.token = secrets.token_urlsafe(16)
        self.nats = nats_server(root / "nats", auth=True).start()
        self.system = System(root / "system", nats=self.nats, env={
            "TWILIO_AUTH_TOKEN": self.token, "OWNER_PHONE": OWNER_PHONE, "PUBLIC_BASE_URL": SPOOL_PUBLIC,
            "LOG_LEVEL": "WARNING",
        })
        self.http = httpx.AsyncClient(timeout=30)
        self.stored: dict[str, float] = {}  # input id -> perf_counter when seen on AGENT
        self._n = 0
        self.watch: Any = None  # the subscription timing inputs onto AGENT

    async def start(self) -> Bus:
        self.system.start("gateway", separate=True)
        self.system.start_one("gateway", "direct", env={"DELEGATE_PORT": str(free_port()), "GATEWAY_SPOOL": "false"})
        self.system.wait_ready(["direct"])
        bus = await Bus.connect(self.nats.url, "bench-probe")
        await bus.ensure_streams(all_owners=True)  # AGENT: its owner (the agent) does not run here

        async def on_input(msg: object) -> None:
            self.stored[json.loads(msg.data)["id"]] = time.perf_counter()  # type: ignore[attr-defined]

        self.watch = await bus.nc.subscribe(topics.AGENT_INPUT.subject, cb=on_input)
        return bus

    def params(self) -> dict[str, str]:
        self._n += 1
        sid = "SM" + f"{self._n:032x}"
        return {
            "MessageSid": sid, "SmsSid": sid, "SmsMessageSid": sid, "AccountSid": "AC" + "b" * 32,
            "From": OWNER_PHONE, "To": "+15550002222", "Body": f"spool bench {self._n}: remind me at 5",
            "NumMedia": "0", "NumSegments": "1", "SmsStatus": "received", "ApiVersion": "2010-04-01",
        }

    async def post(self, instance: str, params: dict[str, str]) -> float:
        """One signed POST /sms; the time to its 200."""
        headers = {"Content-Type": "application/x-www-form-urlencoded",
                   "X-Twilio-Signature": twilio_signature(self.token, SPOOL_PUBLIC + "/sms", params)}
        t0 = time.perf_counter()
        r = await self.http.post(self.system.http_of(instance) + "/sms", content=urlencode(params), headers=headers)
        took = time.perf_counter() - t0
        if r.status_code != 200:
            raise RuntimeError(f"POST /sms to {instance} answered {r.status_code}: {r.text}")
        return took

    async def stop(self) -> None:
        await self.http.aclose()
        self.system.stop()


async def answer_samples(bench: SpoolBench, n: int) -> dict[str, tuple[list[float], list[float]]]:
    """Per gateway: the times to the answer and to the input on AGENT, the two taking turns."""
    out: dict[str, tuple[list[float], list[float]]] = {"gateway": ([], []), "direct": ([], [])}
    for i in range(n):
        for instance in ("gateway", "direct") if i % 2 else ("direct", "gateway"):
            params = bench.params()
            t0 = time.perf_counter()
            answer = await bench.post(instance, params)
            stored = await until(lambda p=params: bench.stored.get(f"sms-{p['MessageSid']}"),  # type: ignore[misc]
                                 f"sms {params['MessageSid']} on AGENT")
            out[instance][0].append(answer)
            out[instance][1].append(stored - t0)
    return out


async def stored_inputs(bus: Bus) -> int:
    return int((await bus.js.stream_info("AGENT")).state.messages)


async def drain_rate(bench: SpoolBench, bus: Bus, n: int) -> tuple[float, float, float]:
    """SMS posted while NATS is down, then drained: (answers/s while down, drain/s, s from NATS up to all stored)."""
    before = await stored_inputs(bus)
    bench.nats.stop()
    t0 = time.perf_counter()
    for _ in range(n):
        await bench.post("gateway", bench.params())  # raises unless 200
    posted = n / (time.perf_counter() - t0)
    bench.nats.start()
    up = time.perf_counter()
    deadline = up + 120
    while await _count_or_zero(bus) < before + n:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"the spool did not drain {n} SMS within 120 s")
        await asyncio.sleep(0.01)
    all_in = time.perf_counter() - up
    info = await bus.js.stream_info("AGENT")
    first = await bus.js.get_msg("AGENT", info.state.last_seq - n + 1)
    last = await bus.js.get_msg("AGENT", info.state.last_seq)
    assert first.time is not None and last.time is not None
    span = (last.time - first.time).total_seconds()
    return posted, (n - 1) / span, all_in


async def _count_or_zero(bus: Bus) -> int:
    try:
        return await stored_inputs(bus)
    except Exception:  # the probe is still reconnecting to the restarted server
        return 0


async def publish_floor(bench: SpoolBench, bus: Bus, n: int) -> float:
    """The same inputs published by this script one at a time, each waiting for JetStream's ack."""
    await bench.watch.unsubscribe()  # this loop does nothing else meanwhile, as the gateway's drain
    payloads = []
    for _ in range(n):
        params = bench.params()
        payloads.append((f"floor:{params['MessageSid']}", json.dumps({"id": f"floor-{params['MessageSid']}",
                                                                       "text": params["Body"]}).encode()))
    t0 = time.perf_counter()
    for msg_id, data in payloads:
        await bus.js.publish(topics.AGENT_INPUT.subject, data, headers={"Nats-Msg-Id": msg_id}, timeout=5)
    return n / (time.perf_counter() - t0)


async def spool_run(args: argparse.Namespace) -> bool:
    bench = SpoolBench(Path(tempfile.mkdtemp(prefix="bench-spool-")))
    bus: Bus | None = None
    try:
        bus = await bench.start()
        await answer_samples(bench, args.warmup * 5)
        samples = await answer_samples(bench, args.spool_samples)
        posted, drained, all_in = await drain_rate(bench, bus, args.outage)
        floor = await publish_floor(bench, bus, args.outage)
    except BaseException:
        print(bench.system.dump_logs()[-8000:], file=sys.stderr)
        raise
    finally:
        if bus is not None:
            await bus.close()
        await bench.stop()

    spool, direct = samples["gateway"], samples["direct"]
    print()
    print(f"the webhook spool: {args.spool_samples} signed POST /sms per gateway, alternating")
    print(f"{'':40}{'p50':>12}{'p99':>12}{'mean':>12}")
    for name, values in (
        ("answer, spool (default)", spool[0]),
        ("answer, direct publish (spool off)", direct[0]),
        ("stored on AGENT, spool", spool[1]),
        ("stored on AGENT, direct publish", direct[1]),
    ):
        print(f"{name:40}{ms(pct(values, 50)):>12}{ms(pct(values, 99)):>12}{ms(statistics.fmean(values)):>12}")
    added = [pct(spool[0], p) - pct(direct[0], p) for p in (50, 99)]
    print(f"{'spool added to the answer':40}{ms(added[0]):>12}{ms(added[1]):>12}")
    print()
    print(f"outage: {args.outage} SMS posted while NATS was down, {posted:,.0f} answers/s (all 200)")
    print(f"  drain after NATS returned: {drained:,.0f} SMS/s (JetStream timestamps, first to last);"
          f" NATS up -> all stored {all_in:.2f} s")
    print(f"  floor, one publish at a time with its ack: {floor:,.0f}/s; the drain is {drained / floor:.0%} of it")
    ok_added = max(added) <= TARGET_SPOOL_ADDED
    ok_drain = drained >= TARGET_DRAIN_RATE
    print()
    print(f"  target: the spool adds <= {TARGET_SPOOL_ADDED * 1000:.0f} ms to the /sms answer at p50 and p99: "
          f"{'PASS' if ok_added else 'MISS'} ({added[0] * 1000:.2f} / {added[1] * 1000:.2f} ms)")
    print(f"  target: drain after an outage >= {TARGET_DRAIN_RATE:.0f} SMS/s: "
          f"{'PASS' if ok_drain else 'MISS'} ({drained:,.0f}/s)")
    return ok_added and ok_drain


async def run_all(args: argparse.Namespace) -> bool:
    turns_ok = True if args.spool_only else await run(args)
    return await spool_run(args) and turns_ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3, help="unmeasured turns per channel first")
    parser.add_argument("--spool-samples", type=int, default=300, help="signed POST /sms per gateway")
    parser.add_argument("--outage", type=int, default=1000, help="SMS posted while NATS is down")
    parser.add_argument("--spool-only", action="store_true", help="only the webhook spool's figures")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    sys.exit(0 if asyncio.run(run_all(args)) else 1)


if __name__ == "__main__":
    main()
