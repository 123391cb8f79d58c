"""Phone-call latency and cost through the real processes, against floors measured in the same run.

    .venv/bin/python bench/voice.py [--minutes 5] [--segment-s 30] [--pickups 10] [--barge-ins 30]
                                    [--speedup 1] [--samples FILE] [--compare-modes]

Starts nats-server, the ledger, the agent, the voice service and the gateway (as ``make run``
starts them) and the OpenAI stand-in's Realtime endpoint, then plays Twilio
(tests/support/twilio_media.py: a signed POST /twiml, the /call Media Stream, caller audio in
20 ms µ-law frames, answer audio played at 8 bytes/ms with every mark echoed when reached):

  relay in     a caller media frame sent on /call -> its input_audio_buffer.append received by
               the stand-in (its recorder is started here stamping each client event on arrival)
  relay out    a response.output_audio.delta sent by the stand-in -> its media frame arriving at
               the fake Twilio (n-th delta of the call <-> n-th answer media frame)
               Both over a --minutes simulated conversation: the caller speaks about a second,
               the stand-in answers (about 3 s of audio, streamed at real-time pace), the caller
               listens to the end, and so on; caller frames never stop, as Twilio's do not.
               With --speedup N the caller's frames go N times faster than real time (the
               answers are then streamed by the stand-in as fast as they are made).
  floor        the same conversation through a direct relay in ONE process (Twilio socket <->
               Realtime socket through the same SDK, no bus, no second service), in a second call
               open alongside: the two calls take turns in --segment-s segments, so both see the
               same machine load. "added" is each percentile minus the floor's
  pick-up      the start event sent -> the first media frame of the greeting, with the stream
               opened 1 s after the TwiML answer (Twilio's usual connect time: the session is
               pre-warmed by then), at once after it (the session still connecting), and with
               pre-warm off (VOICE_PREWARM=false: the session opens only when the stream attaches)
  barge-in     the stand-in's input_audio_buffer.speech_started sent -> the clear arriving at the
               fake Twilio, while an answer plays; the floor relay the same way
  CPU          user+system CPU time of the gateway and the voice processes (from /proc) during
               Delegate's segments of the simulated call, per second of call (one call at a time
               is all the voice lock allows); their idle rate is measured first

Clocks: the stand-in stamps with time.time() and the fake Twilio with time.monotonic(); one
offset read here converts between them (one machine, one kernel clock).
Targets: <= 3 ms p99 added per relay direction; pick-up <= 150 ms with pre-warm; barge-in
<= 20 ms p99.

--compare-modes starts two stacks side by side, each with its own NATS: a process per service,
and every service in one host process (``python -m delegate.host``, as ``make run`` runs them;
CPU is then the whole host's). Their calls and the floor's take turns segment by segment, so all
three see the same machine load, and it prints what the host costs on each direction's p99 (the
host's p99 minus the split stack's; the issue's bound: at most 10% of the relay's added p99),
with a 90% interval from resampling whole segments.
"""

import argparse
import asyncio
import contextlib
import json
import logging
import random
import statistics
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.stats import cpu_seconds, ms, pct  # noqa: E402
from delegate.launcher.procs import free_port, wait_for_port  # noqa: E402
from tests.support.nats import nats_server  # noqa: E402
from tests.support.speech import phone_audio, tools_available  # noqa: E402
from tests.support.standin import TEST_API_KEY, StandinProcess  # noqa: E402
from tests.support.system import System  # noqa: E402
from tests.support.twilio_media import FRAME_BYTES, SILENCE, FakeTwilioCall, new_sid  # noqa: E402
from tests.support.twilio_sign import twilio_signature  # noqa: E402

AUTH_TOKEN = "bench_twilio_auth_token_0123"
PUBLIC = "https://delegate.example.test"
OWNER = "+15550001111"
TWILIO_NUMBER = "+15550002222"
# About 3 s of answer audio at the stand-in's 60 ms per character.
ANSWER = "Sure, that works for me, I will note it down for later."
BARGE_ANSWER = "This answer is long on purpose so that the caller can talk over it. " * 3

TARGET_RELAY_ADDED_P99 = 0.003
TARGET_PICKUP = 0.150
TARGET_BARGE_P99 = 0.020

# Monotonic -> wall clock (the stand-in's stamps), read once.
WALL_OFFSET = time.time() - time.monotonic()

FLOOR_RELAY = textwrap.dedent(
    """
    import asyncio, json, logging, sys
    from openai import AsyncOpenAI
    from websockets.asyncio.server import serve

    PORT, BASE_URL, API_KEY = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    SESSION = {
        "type": "realtime", "output_modalities": ["audio"],
        "audio": {
            "input": {"format": {"type": "audio/pcmu"}, "transcription": {"model": "gpt-4o-mini-transcribe"},
                      "turn_detection": {"type": "server_vad", "create_response": True,
                                         "interrupt_response": True}},
            "output": {"format": {"type": "audio/pcmu"}, "voice": "marin"},
        },
    }

    async def call(ws):
        client = AsyncOpenAI(api_key=API_KEY, base_url=BASE_URL, max_retries=0)
        async with client.realtime.connect(model="gpt-realtime") as rt:
            await rt.session.update(session=SESSION)
            sid = None
            count = 0

            async def model():
                nonlocal count
                while True:
                    event = json.loads(await rt.recv_bytes())
                    kind = event.get("type")
                    if kind == "response.output_audio.delta":
                        count += 1
                        await ws.send(json.dumps({"event": "media", "streamSid": sid,
                                                  "media": {"payload": event["delta"]}}))
                        await ws.send(json.dumps({"event": "mark", "streamSid": sid,
                                                  "mark": {"name": f"{event['item_id']}:{count}"}}))
                    elif kind == "input_audio_buffer.speech_started":
                        await ws.send(json.dumps({"event": "clear", "streamSid": sid}))

            pump = asyncio.create_task(model())
            try:
                async for raw in ws:
                    msg = json.loads(raw)
                    if msg["event"] == "start":
                        sid = msg["start"]["streamSid"]
                    elif msg["event"] == "media":
                        await rt.input_audio_buffer.append(audio=msg["media"]["payload"])
                    elif msg["event"] == "stop":
                        break
            finally:
                pump.cancel()

    async def main():
        logging.getLogger("websockets.server").setLevel(logging.CRITICAL)  # the port probe's bare connect
        async with serve(call, "127.0.0.1", PORT, max_size=None, compression=None):
            await asyncio.Future()

    asyncio.run(main())
    """
)


# ---- the stand-in's records ------------------------------------------------------------------


def wall(stamp: float) -> float:
    """A stand-in stamp (time.time()) on this process's monotonic clock."""
    return stamp - WALL_OFFSET


def appends_received(session: dict[str, Any]) -> list[float]:
    return [wall(e["received_at"]) for e in session["events"] if e.get("type") == "input_audio_buffer.append"]


def sent_times(session: dict[str, Any], kind: str) -> list[float]:
    return [wall(s["at"]) for s in session["sent"] if s.get("type") == kind]


# ---- the caller ------------------------------------------------------------------------------


@dataclass
class TimedCall(FakeTwilioCall):
    """The fake Twilio, noting when each caller media frame left (monotonic)."""

    media_sent: list[float] = field(default_factory=list)

    async def send(self, event: str, **body: Any) -> None:
        await super().send(event, **body)
        if event == "media":
            self.media_sent.append(time.monotonic())

    def media_times(self) -> list[float]:
        return [r.at for r in self.received if r.frame.get("event") == "media"]

    def first_media_after(self, index: int) -> float | None:
        times = self.media_times()
        return times[index] if len(times) > index else None


def call_form(call_sid: str) -> dict[str, str]:
    return {"AccountSid": "AC" + "c" * 32, "ApiVersion": "2010-04-01", "CallSid": call_sid,
            "CallStatus": "ringing", "Direction": "inbound", "From": OWNER, "To": TWILIO_NUMBER}


async def answer_call(system: System, http: httpx.AsyncClient) -> tuple[str, dict[str, str]]:
    """Twilio's webhook; the stream URL and parameters of the TwiML answer."""
    sid = new_sid("CA")
    form = call_form(sid)
    reply = await http.post(
        "/twiml", content=urlencode(form),
        headers={"Content-Type": "application/x-www-form-urlencoded",
                 "X-Twilio-Signature": twilio_signature(AUTH_TOKEN, PUBLIC + "/twiml", form)},
    )
    reply.raise_for_status()
    stream = ET.fromstring(reply.text).find("./Connect/Stream")
    if stream is None:
        raise RuntimeError(f"the TwiML answer has no stream: {reply.text}")
    return stream.attrib["url"], {p.attrib["name"]: p.attrib["value"] for p in stream.findall("Parameter")}


async def until(check: Any, what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout:.0f} s")
        await asyncio.sleep(0.002)
    return value


async def idle_voice(http: httpx.AsyncClient, timeout: float = 30.0) -> None:
    """Until no session holds the voice lock (the previous call has fully ended)."""
    deadline = time.monotonic() + timeout
    while (await http.get("/api/state")).json()["voice"]["active"]:
        if time.monotonic() > deadline:
            raise TimeoutError("the previous call never ended")
        await asyncio.sleep(0.05)


def speech() -> bytes:
    if tools_available():
        return phone_audio("Could you put that on my list for tomorrow, please?")
    raise SystemExit("espeak-ng and sox are needed to render the caller's speech")


class Line:
    """The caller's side of the line: frames every 20 ms (or faster), speech when queued, else silence."""

    def __init__(self, call: TimedCall, pace: float) -> None:
        self.call = call
        self.pace = pace
        self.queue: list[bytes] = []
        self.frames_sent = 0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> "Line":
        self._task = asyncio.create_task(self._run())
        return self

    def say(self, ulaw: bytes) -> None:
        self.queue.extend(ulaw[i:i + FRAME_BYTES] for i in range(0, len(ulaw), FRAME_BYTES))

    @property
    def speaking(self) -> bool:
        return bool(self.queue)

    async def _run(self) -> None:
        start = time.monotonic()
        with contextlib.suppress(Exception):
            while True:
                frame = self.queue.pop(0) if self.queue else SILENCE * FRAME_BYTES
                await self.call.speak(frame, pace=None)
                self.frames_sent += 1
                delay = start + self.frames_sent * self.pace - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


# ---- the measurements ------------------------------------------------------------------------


@dataclass
class Relay:
    # Per segment: a segment's frames share its moment's load (host_cost resamples whole ones).
    inbound_segments: list[list[float]] = field(default_factory=list)
    outbound_segments: list[list[float]] = field(default_factory=list)
    call_seconds: float = 0.0
    turns: int = 0

    @property
    def inbound(self) -> list[float]:
        return flat(self.inbound_segments)

    @property
    def outbound(self) -> list[float]:
        return flat(self.outbound_segments)


def session_record(standin: StandinProcess, session_id: str) -> dict[str, Any]:
    return next(r for r in standin.realtime_sessions() if r["id"] == session_id)


async def segment(call: TimedCall, standin: StandinProcess, session_id: str, seconds: float, pace: float,
                  into: Relay) -> None:
    """Speak, listen to the whole answer, again, for about ``seconds``; per-frame relay times into ``into``.

    Caller frame n of the segment <-> the n-th append the stand-in received in it; the n-th
    audio delta it sent <-> the n-th media frame arriving. The previous segment ended with an
    answer fully played (and 0.4 s of quiet), so nothing of it is still in flight.
    """
    utterance = speech()
    before = session_record(standin, session_id)
    skip_appends = len(appends_received(before))
    skip_deltas = len(sent_times(before, "response.output_audio.delta"))
    skip_media = len(call.media_times())
    first_frame = len(call.media_sent)
    line = Line(call, pace).start()
    began = time.monotonic()
    try:
        while time.monotonic() - began < seconds:
            heard = len(call.media_times())
            line.say(utterance)
            await until(lambda h=heard: len(call.media_times()) > h, "answer audio", 30)
            await until(lambda: answer_over(call), "the answer to play", 60)
            into.turns += 1
    finally:
        await line.stop()
    into.call_seconds += time.monotonic() - began
    after = session_record(standin, session_id)
    received = appends_received(after)[skip_appends:]
    into.inbound_segments.append([r - t for r, t in zip(received, call.media_sent[first_frame:], strict=False)])
    deltas = sent_times(after, "response.output_audio.delta")[skip_deltas:]
    arrived = call.media_times()[skip_media:]
    if len(deltas) != len(arrived):
        print(f"  note: {len(deltas)} deltas sent, {len(arrived)} media frames arrived; matched in order")
    into.outbound_segments.append([a - d for d, a in zip(deltas, arrived, strict=False)])


# Answer audio comes every 100 ms at the stand-in's real-time pace: this long without a frame,
# all of it played and every mark echoed, and the answer is over.
ANSWER_GAP_S = 0.4


def answer_over(call: TimedCall) -> bool:
    times = call.media_times()
    return (bool(times) and time.monotonic() - times[-1] > ANSWER_GAP_S and call.queued_ms == 0
            and not pending_marks(call))


def pending_marks(call: FakeTwilioCall) -> bool:
    sent = {f["mark"]["name"] for f in call.frames("mark")}
    return not sent <= set(call.marks_echoed)


async def barge_ins(call: TimedCall, standin: StandinProcess, session_id: str, n: int, pace: float) -> list[float]:
    """Talk over an answer ``n`` times: speech_started sent -> clear arrived.

    Each short interjection is itself answered (at length), and the next one talks over that.
    """
    utterance = speech()
    line = Line(call, pace).start()
    awaited: list[int] = []  # which clears answered an interjection over a playing answer
    try:
        line.say(utterance)
        for _ in range(n):
            seen = len(call.media_times())
            await until(lambda s=seen: len(call.media_times()) > s + 5 and not line.speaking,
                        "answer audio", 30)
            before = call.clears
            line.say(utterance[: 8 * 600])  # 0.6 s: enough for the VAD
            await until(lambda b=before: call.clears > b, "the clear", 15)
            awaited.append(before)
            await until(lambda: not line.speaking, "the caller to finish", 15)
    finally:
        await line.stop()
    clears = [r.at for r in call.received if r.frame.get("event") == "clear"]
    started = sent_times(session_record(standin, session_id), "input_audio_buffer.speech_started")
    samples = []
    for at in (clears[i] for i in awaited):  # each clear answers the speech_started just before it
        earlier = [s for s in started if s <= at]  # the stand-in stamps when its send began
        if earlier:
            samples.append(at - earlier[-1])
    return samples


async def open_delegate_call(system: System, http: httpx.AsyncClient, *, wait_s: float) -> tuple[TimedCall, float]:
    """A call through Delegate; the start event's send time."""
    url, params = await answer_call(system, http)
    if wait_s:
        await asyncio.sleep(wait_s)  # Twilio's connect time: what pre-warm has to work with
    call = TimedCall(url=f"{system.ws}/call", signed_url=url, auth_token=AUTH_TOKEN)
    started = time.monotonic()
    await call.open(params)
    return call, started


def restart_voice(system: System, env: dict[str, str]) -> None:
    """The voice process again (its host, when hosted), with ``env`` on top of the system's (a new
    process reads it)."""
    key = system.hosted.get("voice", "voice")
    system.procs[key].stop()
    system.extra_env.pop("VOICE_PREWARM", None)
    system.extra_env.update(env)
    if key == "voice":
        system.start_one("voice")
        system.wait_ready(["voice"])
        return
    names = [name for name, host in system.hosted.items() if host == key]
    system.start_host(*names, key=key)
    system.wait_ready(names)


def relay_pids(system: System) -> list[int]:
    """The processes the call goes through: the gateway and voice, or the one host running both."""
    keys = {system.hosted.get(name, name) for name in ("gateway", "voice")}
    return [system.procs[key].pid for key in sorted(keys)]


async def pickups(system: System, http: httpx.AsyncClient, n: int, wait_s: float) -> list[float]:
    samples = []
    for _ in range(n):
        await idle_voice(http)
        call, started = await open_delegate_call(system, http, wait_s=wait_s)
        try:
            first = await until(lambda c=call: c.first_media_after(0), "greeting audio", 30)
            samples.append(first - started)
        finally:
            await call.hang_up()
    return samples


async def open_floor_call(url: str, standin: StandinProcess) -> tuple[TimedCall, str]:
    known = {r["id"] for r in standin.realtime_sessions()}
    call = TimedCall(url=url, signed_url=url, auth_token=AUTH_TOKEN)
    await call.open({})
    fresh = await until(lambda: [r["id"] for r in standin.realtime_sessions() if r["id"] not in known],
                        "the floor's Realtime session", 10)
    return call, fresh[0]


async def open_greeted_call(system: System, http: httpx.AsyncClient, standin: StandinProcess) -> tuple[TimedCall, str]:
    known = {r["id"] for r in standin.realtime_sessions()}
    call, _ = await open_delegate_call(system, http, wait_s=0.5)
    await until(lambda: call.first_media_after(0), "greeting audio", 30)
    await until(lambda: answer_over(call), "the greeting to play", 30)
    fresh = [r["id"] for r in standin.realtime_sessions() if r["id"] not in known]
    return call, fresh[0]


@dataclass
class Route:
    """One way the call can go: a Delegate stack (a process per service, or one host), or the floor."""

    label: str
    system: System | None  # None: the floor's direct relay
    relay: Relay = field(default_factory=Relay)
    found: dict[str, Any] = field(default_factory=dict)


async def pickup_and_idle(system: System, args: argparse.Namespace) -> dict[str, Any]:
    """Pick-ups three ways, then the gateway's and voice's idle CPU rate."""
    out: dict[str, Any] = {}
    async with httpx.AsyncClient(base_url=system.http, headers=system.auth(), timeout=30) as http:
        out["pickup_warm"] = await pickups(system, http, args.pickups, 1.0)
        out["pickup_cold"] = await pickups(system, http, args.pickups, 0.0)
        # Pre-warm off: the voice service opens the Realtime session only once the stream attaches.
        await asyncio.to_thread(restart_voice, system, {"VOICE_PREWARM": "false"})
        out["pickup_off"] = await pickups(system, http, args.pickups, 1.0)
        await asyncio.to_thread(restart_voice, system, {})
        pids = relay_pids(system)
        await idle_voice(http)
        idle_start, idle_cpu = time.monotonic(), cpu_seconds(pids)
        await asyncio.sleep(args.idle_s)
        out["idle_cpu_rate"] = (cpu_seconds(pids) - idle_cpu) / (time.monotonic() - idle_start)
    return out


async def open_route_call(route: Route, standin: StandinProcess, floor_url: str) -> tuple[TimedCall, str]:
    if route.system is None:
        return await open_floor_call(floor_url, standin)
    async with httpx.AsyncClient(base_url=route.system.http, headers=route.system.auth(), timeout=30) as http:
        await idle_voice(http)
        return await open_greeted_call(route.system, http, standin)


async def relay_rounds(routes: list[Route], standin: StandinProcess, floor_url: str, args: argparse.Namespace) -> None:
    """Every route's call stays open; their segments take turns, so all see the same machine load."""
    standin.realtime_reset()
    standin.realtime_script({"answer": ANSWER, "times": 100_000})
    calls = [await open_route_call(route, standin, floor_url) for route in routes]
    cpu = {route.label: 0.0 for route in routes}
    pace = 0.02 / args.speedup
    try:
        for _ in range(max(1, round(args.minutes * 60 / args.segment_s))):
            for route, (call, session) in zip(routes, calls, strict=True):
                pids = relay_pids(route.system) if route.system is not None else []
                cpu_before = cpu_seconds(pids)
                await segment(call, standin, session, args.segment_s, pace, route.relay)
                cpu[route.label] += cpu_seconds(pids) - cpu_before
    finally:
        for call, _ in calls:
            await call.hang_up()
    for route in routes:
        route.found["cpu"] = cpu[route.label] / route.relay.call_seconds


async def barge_rounds(routes: list[Route], standin: StandinProcess, floor_url: str, args: argparse.Namespace) -> None:
    standin.realtime_reset()
    standin.realtime_script({"answer": BARGE_ANSWER, "times": (args.barge_ins * 4 + 4) * len(routes)})
    for route in routes:
        call, session = await open_route_call(route, standin, floor_url)
        try:
            route.found["barge"] = await barge_ins(call, standin, session, args.barge_ins, 0.02)
        finally:
            await call.hang_up()


def row(name: str, samples: list[float], floor: list[float] | None = None) -> None:
    line = f"{name:42}{ms(pct(samples, 50)):>12}{ms(pct(samples, 99)):>12}{ms(statistics.fmean(samples)):>12}"
    print(line + f"{len(samples):>8}")
    if floor:
        added = [pct(samples, p) - pct(floor, p) for p in (50, 99)]
        print(f"{'  added over the floor':42}{ms(added[0]):>12}{ms(added[1]):>12}")


def report(stack: Route, floor: Route) -> bool:
    """One stack's figures against the floor; whether every target held."""
    relay, base, found = stack.relay, floor.relay, stack.found
    print(f"\n{stack.label}")
    print(f"{'':42}{'p50':>12}{'p99':>12}{'mean':>12}{'n':>8}")
    row("relay in: /call frame -> stand-in append", relay.inbound, base.inbound)
    row("  floor (one-process relay)", base.inbound)
    row("relay out: stand-in delta -> /call frame", relay.outbound, base.outbound)
    row("  floor (one-process relay)", base.outbound)
    row("pick-up -> first greeting audio, pre-warmed", found["pickup_warm"])
    row("  stream opened at once (still warming)", found["pickup_cold"])
    row("  pre-warm off (VOICE_PREWARM=false)", found["pickup_off"])
    row("barge-in: speech_started -> clear", found["barge"], floor.found["barge"])
    row("  floor (one-process relay)", floor.found["barge"])
    net = found["cpu"] - found["idle_cpu_rate"]
    print(f"\nCPU gateway+voice: {found['cpu'] * 1000:.1f} ms per call-second "
          f"({found['idle_cpu_rate'] * 1000:.1f} ms/s idle, {net * 1000:.1f} ms/s for the call itself); "
          f"{relay.turns} turns in {relay.call_seconds:.0f} s")

    added_in = pct(relay.inbound, 99) - pct(base.inbound, 99)
    added_out = pct(relay.outbound, 99) - pct(base.outbound, 99)
    warm = pct(found["pickup_warm"], 99)
    barge = pct(found["barge"], 99)
    checks = [
        (f"relay in: added p99 <= {TARGET_RELAY_ADDED_P99 * 1000:.0f} ms", added_in <= TARGET_RELAY_ADDED_P99,
         added_in),
        (f"relay out: added p99 <= {TARGET_RELAY_ADDED_P99 * 1000:.0f} ms", added_out <= TARGET_RELAY_ADDED_P99,
         added_out),
        (f"pick-up p99 with pre-warm <= {TARGET_PICKUP * 1000:.0f} ms", warm <= TARGET_PICKUP, warm),
        (f"barge-in p99 <= {TARGET_BARGE_P99 * 1000:.0f} ms", barge <= TARGET_BARGE_P99, barge),
    ]
    print()
    for name, ok, value in checks:
        print(f"  target: {name}: {'PASS' if ok else 'MISS'} ({value * 1000:.2f} ms)")
    return all(ok for _, ok, _ in checks)


def host_cost(split: Route, host: Route, floor: Route) -> None:
    """What one host process costs on each direction's p99, split and host measured in turns in one run.

    The floor cancels: the cost is the host's p99 minus the split stack's. Its spread comes from
    resampling whole segments (a segment's frames share its moment's load), 2,000 times.
    """
    rng = random.Random(27)
    print()
    for name, a, b, base in (
        ("relay in", split.relay.inbound_segments, host.relay.inbound_segments, floor.relay.inbound),
        ("relay out", split.relay.outbound_segments, host.relay.outbound_segments, floor.relay.outbound),
    ):
        split_p99, host_p99 = pct(flat(a), 99), pct(flat(b), 99)
        cost = host_p99 - split_p99
        spread = sorted(pct(flat(rng.choices(b, k=len(b))), 99) - pct(flat(rng.choices(a, k=len(a))), 99)
                        for _ in range(2000))
        low, high = spread[100], spread[1899]
        added = split_p99 - pct(base, 99)
        bound = 0.10 * max(added, 0.0)
        print(f"{name}: p99 {ms(host_p99).strip()} in one host vs {ms(split_p99).strip()} split: the host costs "
              f"{cost * 1000:+.2f} ms (90% interval {low * 1000:+.2f} .. {high * 1000:+.2f} ms); split's added "
              f"p99 {added * 1000:.2f} ms, bound +10% of it = {bound * 1000:.2f} ms: "
              f"{'within' if cost <= bound else 'OVER'} (point), "
              f"{'within' if high <= bound else 'not shown'} (interval's upper end)")


def flat(segments: list[list[float]]) -> list[float]:
    return [sample for seg in segments for sample in seg]


def start_stack(root: Path, standin: StandinProcess, one_process: bool) -> System:
    nats = nats_server(root / "nats", auth=True).start()
    system = System(root / "system", nats=nats)
    system.extra_env.update({
        "OPENAI_API_KEY": TEST_API_KEY,
        "OPENAI_BASE_URL": standin.base_url,
        "LOG_LEVEL": "WARNING",
        "COMPACT_THRESHOLD": "10000000",
        "IDLE_SPAN_SECONDS": "100000",
        "TWILIO_AUTH_TOKEN": AUTH_TOKEN,
        "OWNER_PHONE": OWNER,
        "PUBLIC_BASE_URL": PUBLIC,
        # The calls take turns: ours hears no caller frames while another route's segment runs,
        # which Twilio's never does; the gateway would end it as a lost stream.
        "VOICE_MEDIA_TIMEOUT_S": "3600",
    })
    system.start("ledger", "agent", "voice", "gateway", separate=not one_process, one_process=one_process)
    return system


async def run(args: argparse.Namespace, modes: list[bool]) -> bool:
    """One run over every stack in ``modes`` (False: a process per service, True: one host) and the
    floor; whether every target held in every stack."""
    root = Path(tempfile.mkdtemp(prefix="bench-voice-"))
    env = {"STANDIN_REALTIME_PACE": "instant" if args.speedup > 1 else "realtime"}
    standin = StandinProcess(log_dir=root / "standin", env=env).start()
    floor_port = free_port()
    floor_proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", FLOOR_RELAY, str(floor_port), standin.base_url, TEST_API_KEY,
    )
    floor_url = f"ws://127.0.0.1:{floor_port}/call"
    stacks: list[Route] = []
    try:
        await asyncio.to_thread(wait_for_port, floor_port, 20)
        for one_process in modes:
            label = "every service in one host process" if one_process else "a process per service"
            system = start_stack(root / ("host" if one_process else "split"), standin, one_process)
            stacks.append(Route(label, system))
        floor = Route("floor", None)
        print(" and ".join(s.label for s in stacks) + f" (each its own NATS), and the floor: a simulated call "
              f"of {args.minutes:g} min per path in {args.segment_s:g} s segments, taking turns "
              f"(caller frames {args.speedup:g}x real time), {args.pickups} pick-ups each way, "
              f"{args.barge_ins} barge-ins; stand-in pace {env['STANDIN_REALTIME_PACE']}")
        for stack in stacks:
            assert stack.system is not None
            stack.found.update(await pickup_and_idle(stack.system, args))
        await relay_rounds([*stacks, floor], standin, floor_url, args)
        await barge_rounds([*stacks, floor], standin, floor_url, args)
    except BaseException:
        for stack in stacks:
            if stack.system is not None:
                print(stack.system.dump_logs()[-8000:], file=sys.stderr)
        raise
    finally:
        for stack in stacks:
            if stack.system is not None:
                stack.system.stop()
        floor_proc.terminate()
        await floor_proc.wait()
        standin.stop()

    if args.samples:
        args.samples.write_text(json.dumps({
            "floor_in": floor.relay.inbound, "floor_out": floor.relay.outbound, "floor_barge": floor.found["barge"],
            **{("host" if one_process else "split"): {
                "relay_in": s.relay.inbound, "relay_out": s.relay.outbound, **{
                    k: s.found[k] for k in ("pickup_warm", "pickup_cold", "pickup_off", "barge")}}
               for one_process, s in zip(modes, stacks, strict=True)},
        }))
    held = [report(stack, floor) for stack in stacks]
    if len(stacks) == 2:
        host_cost(stacks[0], stacks[1], floor)
    return all(held)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=5.0, help="length of the simulated call, per path")
    parser.add_argument("--segment-s", type=float, default=30.0, help="the paths alternate in segments this long")
    parser.add_argument("--speedup", type=float, default=1.0, help="caller frames this many times real time")
    parser.add_argument("--pickups", type=int, default=10, help="calls measured per pick-up variant")
    parser.add_argument("--barge-ins", type=int, default=30)
    parser.add_argument("--idle-s", type=float, default=10.0, help="idle CPU measured this long first")
    parser.add_argument("--samples", type=Path, help="also write every sample (seconds) to this JSON file")
    parser.add_argument("--compare-modes", action="store_true",
                        help="a process per service and every service in one host, side by side, in turns")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("delegate.runtime.bus").setLevel(logging.ERROR)
    sys.exit(0 if asyncio.run(run(args, [False, True] if args.compare_modes else [False])) else 1)

if __name__ == "__main__":
    main()
