"""Twilio's side of a bidirectional Media Stream (twilio-email-wire.md §1.4-1.8), for tests and the bench.

``FakeTwilioCall`` opens the stream socket as Twilio does: the upgrade signed over the public
``wss://`` URL with the account's auth token, then ``connected`` and ``start`` (with the TwiML's
``<Parameter>``s as ``customParameters``). ``speak`` sends caller audio as Twilio does: frames of
160 µ-law bytes every 20 ms, with ``sequenceNumber``, ``chunk`` and ``timestamp`` as strings.

Meanwhile a reader and a player stand in for the phone: answer audio is queued and played at
8 bytes per millisecond; a ``mark`` is echoed when playback reaches it (at once when nothing is
queued); ``clear`` drops the queued audio and echoes every pending mark. ``played`` is what the
caller heard; ``received`` is every frame the server sent, with the time it came.
"""

import asyncio
import base64
import contextlib
import itertools
import json
import secrets
import time
import xml.etree.ElementTree as ET
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from tests.support.twilio_sign import twilio_signature

FRAME_BYTES = 160  # 20 ms of 8 kHz µ-law
FRAME_MS = 20
BYTES_PER_MS = 8
SILENCE = b"\xff"  # µ-law digital silence


def new_sid(prefix: str) -> str:
    """A Twilio-shaped SID: two letters and 32 hex digits."""
    return prefix + secrets.token_hex(16)


def incoming_call_params(call_sid: str, caller: str, called: str) -> dict[str, str]:
    """What Twilio posts to the voice webhook when a call comes in (§1.1; blank geo fields are signed too)."""
    return {
        "AccountSid": "AC" + "c" * 32, "ApiVersion": "2010-04-01", "CallSid": call_sid, "CallStatus": "ringing",
        "Direction": "inbound", "From": caller, "To": called, "Caller": caller, "Called": called,
        "FromCity": "", "FromState": "", "FromCountry": "US", "ToCity": "", "ToZip": "",
    }


def stream_from_twiml(twiml: str) -> tuple[str, dict[str, str]]:
    """The ``<Connect><Stream>`` of a TwiML answer: its url and its ``<Parameter>``s, as Twilio reads them."""
    root = ET.fromstring(twiml)
    stream = root.find("./Connect/Stream")
    if stream is None:
        raise AssertionError(f"the TwiML connects no stream: {twiml}")
    params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return stream.get("url", ""), params


@dataclass
class Received:
    at: float  # time.monotonic() when it arrived
    frame: dict[str, Any]


@dataclass
class FakeTwilioCall:
    url: str  # where the socket is opened, e.g. ws://127.0.0.1:PORT/call
    signed_url: str  # the URL Twilio signs: the TwiML's wss://<public host>/call
    auth_token: str
    stream_sid: str = field(default_factory=lambda: new_sid("MZ"))
    call_sid: str = field(default_factory=lambda: new_sid("CA"))
    account_sid: str = "AC" + "c" * 32

    ws: ClientConnection | None = None
    received: list[Received] = field(default_factory=list)
    played: bytearray = field(default_factory=bytearray)
    marks_echoed: list[str] = field(default_factory=list)
    clears: int = 0
    close_code: int | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self._seq = itertools.count(1)
        self._chunk = 0
        self._playout: deque[tuple[str, Any]] = deque()  # ("audio", bytes) | ("mark", name)
        self._tasks: list[asyncio.Task[None]] = []
        self._send_lock = asyncio.Lock()
        self._changed = asyncio.Event()

    # ---- opening ---------------------------------------------------------------------------

    async def open(
        self, params: dict[str, str], *, signature: str | None = None, send_connected: bool = True
    ) -> "FakeTwilioCall":
        """Connect (signed unless ``signature`` is given; ``""`` sends none), then connected + start."""
        if signature is None:
            signature = twilio_signature(self.auth_token, self.signed_url, {})
        headers = {"X-Twilio-Signature": signature} if signature else {}
        self.ws = await websockets.connect(self.url, additional_headers=headers, max_size=None)
        self._tasks = [asyncio.create_task(self._reader()), asyncio.create_task(self._player())]
        if send_connected:
            await self.send_raw({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self.send("start", start={
            "streamSid": self.stream_sid, "accountSid": self.account_sid, "callSid": self.call_sid,
            "tracks": ["inbound"], "customParameters": params,
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        })
        return self

    async def __aenter__(self) -> "FakeTwilioCall":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- sending ---------------------------------------------------------------------------

    async def send_raw(self, frame: dict[str, Any] | str) -> None:
        assert self.ws is not None, "open() first"
        async with self._send_lock:
            await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def send(self, event: str, **body: Any) -> None:
        """A Twilio message after ``connected``: sequenceNumber and streamSid added."""
        await self.send_raw(
            {"event": event, "sequenceNumber": str(next(self._seq)), "streamSid": self.stream_sid, **body}
        )

    async def speak(self, ulaw: bytes, *, pace: float | None = FRAME_MS / 1000) -> None:
        """Send caller audio as 160-byte frames, one per ``pace`` seconds (None: as fast as possible).

        Paced on the clock, not by sleeping a fixed time after each frame, so a slow loop does
        not stretch the call.
        """
        start = time.monotonic()
        for n, i in enumerate(range(0, len(ulaw), FRAME_BYTES)):
            frame = ulaw[i:i + FRAME_BYTES].ljust(FRAME_BYTES, SILENCE)
            self._chunk += 1
            await self.send("media", media={
                "track": "inbound", "chunk": str(self._chunk), "timestamp": str((self._chunk - 1) * FRAME_MS),
                "payload": base64.b64encode(frame).decode(),
            })
            if pace is not None:
                delay = start + (n + 1) * pace - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)

    async def silence(self, ms: int, *, pace: float | None = FRAME_MS / 1000) -> None:
        await self.speak(SILENCE * (ms * BYTES_PER_MS), pace=pace)

    async def dtmf(self, digit: str) -> None:
        await self.send("dtmf", dtmf={"track": "inbound_track", "digit": digit})

    async def hang_up(self) -> None:
        """The caller hangs up: ``stop``, then the socket closes."""
        with contextlib.suppress(Exception):
            await self.send("stop", stop={"accountSid": self.account_sid, "callSid": self.call_sid})
        await self.close()

    async def close(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- the phone's side: reading and playing -----------------------------------------------

    async def _reader(self) -> None:
        assert self.ws is not None
        try:
            async for raw in self.ws:
                frame = json.loads(raw)
                self.received.append(Received(time.monotonic(), frame))
                event = frame.get("event")
                if event == "media":
                    self._playout.append(("audio", base64.b64decode(frame["media"]["payload"])))
                elif event == "mark":
                    self._playout.append(("mark", frame["mark"]["name"]))
                elif event == "clear":
                    self.clears += 1
                    pending = [value for kind, value in self._playout if kind == "mark"]
                    self._playout.clear()
                    for name in pending:
                        await self._echo(name)
                self._changed.set()
        except websockets.ConnectionClosed:
            pass
        finally:
            self.close_code = self.ws.close_code
            self.closed.set()
            self._changed.set()

    async def _echo(self, name: str) -> None:
        self.marks_echoed.append(name)
        with contextlib.suppress(websockets.ConnectionClosed):
            await self.send("mark", mark={"name": name})

    async def _player(self) -> None:
        """Plays 8 bytes per elapsed millisecond, like a phone line; marks echo when reached."""
        last = time.monotonic()
        while True:
            await asyncio.sleep(FRAME_MS / 1000)
            now = time.monotonic()
            budget = int((now - last) * 1000 * BYTES_PER_MS)
            last = now
            while self._playout:
                kind, value = self._playout[0]
                if kind == "mark":
                    self._playout.popleft()
                    await self._echo(value)
                    continue
                if budget <= 0:
                    break
                take, rest = value[:budget], value[budget:]
                self.played += take
                budget -= len(take)
                if rest:
                    self._playout[0] = ("audio", rest)
                else:
                    self._playout.popleft()
            self._changed.set()

    # ---- what the tests read -------------------------------------------------------------------

    def frames(self, event: str) -> list[dict[str, Any]]:
        return [r.frame for r in self.received if r.frame.get("event") == event]

    @property
    def audio_received(self) -> bytes:
        return b"".join(base64.b64decode(f["media"]["payload"]) for f in self.frames("media"))

    @property
    def queued_ms(self) -> float:
        """Answer audio received but not played yet."""
        return sum(len(value) for kind, value in self._playout if kind == "audio") / BYTES_PER_MS

    async def wait_for(self, predicate: Callable[["FakeTwilioCall"], bool], timeout: float = 20.0,
                       what: str = "condition") -> None:
        """Until ``predicate(self)`` holds, checked whenever a frame arrives or audio plays
        (woken by them, not polled: so not tests.support.waiting.eventually)."""
        deadline = time.monotonic() + timeout
        while not predicate(self):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"fake Twilio: timed out waiting for {what}")
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 0.5))

    async def wait_closed(self, timeout: float = 20.0) -> int | None:
        await asyncio.wait_for(self.closed.wait(), timeout)
        return self.close_code
