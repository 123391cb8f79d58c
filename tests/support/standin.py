"""The offline OpenAI stand-in as a real subprocess, plus its control API.

    with start_standin() as standin:
        standin.script({"action": "text", "text": "hi"})
        standin.realtime_script({"transcript": "hello", "answer": "hi there"})  # Realtime turns
        client = standin.client()            # openai.OpenAI pointed at it
        client.responses.create(model="gpt-5.5", input="hello")
        assert standin.requests()[-1]["body"]["input"] == "hello"

The process logs to a file (never a pipe, which could fill and stall it).
"""

import array
import asyncio
import base64
import json
import math
import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from openai import AsyncOpenAI, OpenAI

from delegate.launcher.procs import ManagedProcess, free_port, python_module

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import audioop

SRC = Path(__file__).resolve().parents[2] / "services" / "openai-standin" / "src"
TEST_API_KEY = "sk-standin-test"


class StandinProcess:
    def __init__(
        self, *, latency_ms: int = 0, env: dict[str, str] | None = None, log_dir: Path | None = None,
        demo_pace_ms: int = 0,
    ) -> None:
        self.latency_ms = latency_ms
        # The offline demo's reading pace is off in tests unless one asks for it (it would only
        # slow them down); `make run` and compose keep the stand-in's own default.
        self.demo_pace_ms = demo_pace_ms
        self.extra_env = env or {}
        # Logs go to `log_dir` when given (kept); otherwise to a temporary folder removed on stop.
        self._own_log_dir = log_dir is None
        self.log_dir = log_dir or Path(tempfile.mkdtemp(prefix="openai-standin-"))
        self.port = 0
        self.process: ManagedProcess | None = None
        self._http: httpx.Client | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self, timeout: float = 15.0) -> "StandinProcess":
        """Start on a free port; retried if another process grabs the port first."""
        for attempt in range(3):
            self.port = free_port()
            env = {
                **os.environ,
                "STANDIN_HOST": "127.0.0.1",
                "STANDIN_PORT": str(self.port),
                "STANDIN_LATENCY_MS": str(self.latency_ms),
                "STANDIN_DEMO_PACE_MS": str(self.demo_pace_ms),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")])),
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
            }
            log_path = self.log_dir / f"openai-standin.{self.port}.log"
            self.process = python_module("openai-standin", "delegate.openai_standin", env, log_path).start()
            if self._wait_ready(timeout):
                return self
            log = self.log_text()
            self.kill()
            if "address already in use" not in log.lower() or attempt == 2:
                raise RuntimeError(f"openai stand-in did not start:\n{log[-3000:]}")
        raise AssertionError("unreachable")

    def _wait_ready(self, timeout: float) -> bool:
        # Not waiting.eventually: a process that died ends the wait at once with False, and
        # start() then tries again (another port), so a timeout is not a failure here.
        deadline = time.monotonic() + timeout

        while time.monotonic() < deadline:
            if not self.alive():
                return False
            if self.healthy():
                return True
            time.sleep(0.05)
        return False

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def healthy(self) -> bool:
        try:
            return httpx.get(f"{self.root_url}/_standin/health", timeout=0.5).status_code == 200
        except httpx.HTTPError:
            return False

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM, then SIGKILL after `timeout`."""
        self._close_http()
        if self.process is not None:
            self.process.stop(timeout)
        if self._own_log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)

    def kill(self) -> None:
        self._close_http()
        if self.process is not None:
            self.process.kill()

    def log_text(self) -> str:
        return self.process.log_text() if self.process is not None else ""

    def __enter__(self) -> "StandinProcess":
        return self if self.alive() else self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    # -- addresses and SDK clients -----------------------------------------

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What the SDK takes as `base_url` (or `OPENAI_BASE_URL`)."""
        return f"{self.root_url}/v1"

    def client(self, **kwargs: Any) -> OpenAI:
        return OpenAI(api_key=TEST_API_KEY, base_url=self.base_url, **kwargs)

    def async_client(self, **kwargs: Any) -> AsyncOpenAI:
        return AsyncOpenAI(api_key=TEST_API_KEY, base_url=self.base_url, **kwargs)

    # -- control API -------------------------------------------------------

    def script(self, *steps: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Queue steps (dicts, or lists of dicts); returns how many are pending."""
        flat: list[dict[str, Any]] = []
        for step in steps:
            flat.extend(step if isinstance(step, list) else [step])
        reply = self._control().post("/_standin/script", json=flat)
        if reply.status_code != 200:
            raise ValueError(f"stand-in refused the script: {reply.text}")
        return int(reply.json()["pending"])

    def pending_script(self) -> list[dict[str, Any]]:
        return list(self._control().get("/_standin/script").raise_for_status().json())

    def requests(self, path: str | None = None, method: str | None = None) -> list[dict[str, Any]]:
        """Every /v1 request received, oldest first; optionally one path/method only."""
        entries: list[dict[str, Any]] = self._control().get("/_standin/requests").raise_for_status().json()
        return [e for e in entries if (path is None or e["path"] == path) and (method is None or e["method"] == method)]

    def response_requests(self) -> list[dict[str, Any]]:
        """Just the `POST /v1/responses` calls."""
        return self.requests("/v1/responses", "POST")

    def stored(self, response_id: str) -> dict[str, Any]:
        """A stored response plus the chain context the stand-in keeps for it."""
        return dict(self._control().get(f"/_standin/responses/{response_id}").raise_for_status().json())

    def reset(self) -> None:
        """Forget script, recorded requests and stored responses, and the Realtime
        script and sessions (the stand-in's reset covers both)."""
        self._control().post("/_standin/reset").raise_for_status()

    # -- Realtime control API ----------------------------------------------

    def realtime_script(self, *steps: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Queue Realtime steps for the coming user turns; returns how many are pending."""
        flat: list[dict[str, Any]] = []
        for step in steps:
            flat.extend(step if isinstance(step, list) else [step])
        reply = self._control().post("/_standin/realtime/script", json=flat)
        if reply.status_code != 200:
            raise ValueError(f"stand-in refused the realtime script: {reply.text}")
        return int(reply.json()["pending"])

    def realtime_pending_script(self) -> list[dict[str, Any]]:
        return list(self._control().get("/_standin/realtime/script").raise_for_status().json())

    def realtime_sessions(self) -> list[dict[str, Any]]:
        """Every Realtime session so far: client events, server event types sent,
        truncations and cancels (see the stand-in's README)."""
        return list(self._control().get("/_standin/realtime/sessions").raise_for_status().json())

    def realtime_reset(self) -> None:
        """Forget the Realtime script and sessions only."""
        self._control().post("/_standin/realtime/reset").raise_for_status()

    def _control(self) -> httpx.Client:
        if self._http is None:
            # No kept-alive connections: the stand-in (uvicorn) closes an idle one after 5 s, and a
            # request sent on it as it closes fails with "Server disconnected" (seen in CI).
            self._http = httpx.Client(
                base_url=self.root_url, timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0)
            )
        return self._http

    def _close_http(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


@contextmanager
def start_standin(**kwargs: Any) -> Iterator[StandinProcess]:
    """A running stand-in for the duration of the block (kwargs: latency_ms, env, log_dir)."""
    standin = StandinProcess(**kwargs).start()
    try:
        yield standin
    finally:
        standin.stop()


# -- Realtime test audio and events -----------------------------------------

ULAW: dict[str, Any] = {"type": "audio/pcmu"}
PCM24: dict[str, Any] = {"type": "audio/pcm", "rate": 24000}


def speech_audio(speech_ms: int, silence_ms: int, *, lead_ms: int = 0, fmt: dict[str, Any] = ULAW) -> bytes:
    """Speech-like input for the stand-in's energy VAD: `lead_ms` of silence, a loud
    300 Hz burst of `speech_ms`, then `silence_ms` of silence, encoded in `fmt`
    (µ-law 8 kHz or PCM16 24 kHz)."""
    rate = 8000 if fmt["type"] == "audio/pcmu" else 24000
    lead, burst, tail = (rate * ms // 1000 for ms in (lead_ms, speech_ms, silence_ms))
    samples = array.array("h", [0] * lead)
    samples.extend(int(9000 * math.sin(2 * math.pi * 300 * n / rate)) for n in range(burst))
    samples.extend([0] * tail)
    pcm = samples.tobytes()
    if fmt["type"] != "audio/pcmu":
        return pcm
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return audioop.lin2ulaw(pcm, 2)


async def append_audio(connection: Any, data: bytes, *, chunk_bytes: int = 160) -> None:
    """Send `data` as `input_audio_buffer.append` events (160 bytes = 20 ms of µ-law)."""
    for start in range(0, len(data), chunk_bytes):
        chunk = base64.b64encode(data[start : start + chunk_bytes]).decode()
        await connection.input_audio_buffer.append(audio=chunk)


class RealtimeEvents:
    """Reads server events off an SDK Realtime connection as plain dicts, keeping
    every one seen (`seen`) so a test can check the order afterwards."""

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.seen: list[dict[str, Any]] = []

    async def next(self, timeout: float = 10.0) -> dict[str, Any]:
        raw = await asyncio.wait_for(self.connection.recv_bytes(), timeout)
        event: dict[str, Any] = json.loads(raw)
        self.seen.append(event)
        return event

    async def until(self, kind: str, timeout: float = 15.0, **fields: Any) -> dict[str, Any]:
        """The next event of type `kind` (whose top-level `fields` match), reading past others."""
        deadline = time.monotonic() + timeout
        while True:
            event = await self.next(max(0.01, deadline - time.monotonic()))
            if event["type"] == kind and all(event.get(k) == v for k, v in fields.items()):
                return event

    def types(self) -> list[str]:
        return [event["type"] for event in self.seen]
