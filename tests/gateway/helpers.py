"""Gateway test helpers: a real uvicorn serving ``create_app`` in-process, WebSocket and stream readers."""

import asyncio
import contextlib
import io
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
import websockets
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.connection import Connection
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from delegate.contracts import topics
from delegate.contracts.events import Event, Message, make_event
from delegate.contracts.messages import UserInput
from delegate.gateway.app import create_app
from delegate.gateway.deps import GatewayContext
from delegate.gateway.main import WS_MAX_MESSAGE_BYTES, uvicorn_config
from delegate.gateway.settings import Settings
from delegate.launcher.procs import free_port
from delegate.runtime.bus import Bus
from tests.support.waiting import eventually

TOKEN = "test-owner-token-0123456789"
SESSION_COOKIE = "delegate_session"
# How long a test's HTTP client waits for an answer: as long as a frame wait (``recv_until``).
# httpx's own 5 s ran out under CPU starvation (a refusal took longer at load 16 on 2 cores).
PATIENT_S = 30.0


def gateway_settings(nats_url: str, root: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "nats_url": nats_url,
        "runtime_data_dir": root / "runtime-data",
        "delegate_port": free_port(),
        "delegate_token": TOKEN,
        "client_dir": root / "client",
        **overrides,
    }
    return Settings(_env_file=None, **values)


@dataclass
class Gateway:
    settings: Settings
    server: uvicorn.Server

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.settings.delegate_port}"

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.settings.delegate_port}"

    @property
    def bus_ready(self) -> bool:
        return self.server.config.loaded_app is not None and gateway_context(self).bus is not None


def gateway_context(gw: Gateway) -> GatewayContext:
    app = gw.server.config.loaded_app
    while not hasattr(app, "state"):  # uvicorn wraps the app in middleware
        app = app.app
    ctx: GatewayContext = app.state.ctx
    return ctx


@asynccontextmanager
async def running_gateway(
    settings: Settings, *, wait_for_bus: bool = True, served: dict[str, Any] | None = None
) -> AsyncIterator[Gateway]:
    """The production app on a real uvicorn (same event loop as the test), connected to the bus.
    ``served``: uvicorn options to change (the WebSocket keepalive, say)."""
    config = uvicorn_config(
        create_app(settings),
        settings,
        host="127.0.0.1",
        lifespan="on",
        ws_max_size=WS_MAX_MESSAGE_BYTES,
        timeout_graceful_shutdown=2,
        **(served or {}),
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    gw = Gateway(settings, server)
    await eventually(lambda: server.started or task.done(), "uvicorn to start")
    if task.done():
        task.result()
    if wait_for_bus:
        await eventually(lambda: gw.bus_ready, "the gateway to connect to NATS")
    try:
        yield gw
    finally:
        server.should_exit = True
        await stopped(task)


async def stopped(serving: "asyncio.Task[None]") -> None:
    """The server's task ends (its lifespan shutdown is the gateway's stop); if it has not within
    PATIENT_S, the failure shows what every task of the loop was still doing. A stop once took
    over 15 s here (tests/gateway/test_frame_fuzz.py, at load 5), with no trace of where."""
    done, _ = await asyncio.wait({serving}, timeout=PATIENT_S)
    if not done:
        stacks = io.StringIO()
        for other in asyncio.all_tasks():
            if other is not asyncio.current_task():
                other.print_stack(limit=12, file=stacks)
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        raise AssertionError(f"the gateway had not stopped {PATIENT_S} s after it was told to; its loop's tasks:\n"
                             f"{stacks.getvalue()}")
    serving.result()


def auth() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


async def sign_in(http: str, token: str = TOKEN) -> str:
    """A real sign-in (``POST /api/session``, as the page does it); the session cookie's value."""
    async with httpx.AsyncClient(timeout=PATIENT_S, base_url=http) as c:
        r = await c.post("/api/session", json={"token": token}, headers={"Origin": http})
    assert r.status_code == 204, r.text
    return r.cookies[SESSION_COOKIE]


def cookie_headers(cookie: str, origin: str | None) -> dict[str, str]:
    """What a browser sends with the cookie, from a page of ``origin`` (None: no Origin header)."""
    return {"Cookie": f"{SESSION_COOKIE}={cookie}", **({"Origin": origin} if origin else {})}


async def connect(gw_ws: str, *, token: str | None = TOKEN, **kwargs: Any) -> ClientConnection:
    url = f"{gw_ws}/chat" + (f"?token={token}" if token else "")
    return await websockets.connect(url, max_size=8 * 1024 * 1024, **kwargs)


async def recv(ws: Connection, timeout: float = 20.0) -> dict[str, Any]:
    frame: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), timeout))
    return frame


async def recv_until(
    ws: Connection, predicate: Callable[[dict[str, Any]], bool], timeout: float = 30.0
) -> list[dict[str, Any]]:
    """Every frame up to and including the first one matching ``predicate``."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError(f"no matching frame in time; got {[f.get('type') for f in frames][-20:]}")
        frame = await recv(ws, remaining)
        frames.append(frame)
        if predicate(frame):
            return frames


def seqs(frames: list[dict[str, Any]]) -> list[int]:
    return [f["event"]["seq"] for f in frames if f.get("type") == "event"]


def user_event(text: str, *, conversation_id: str = "conv-1", span_id: str | None = "span-1") -> Event:
    return make_event(Message(text=text), conversation_id=conversation_id, span_id=span_id, channel="text", role="user")


async def produce(bus: Bus, events: list[Event]) -> None:
    """Publish events on LEDGER_APPEND as any producer does (in flight together, like the agent)."""
    await asyncio.gather(*(bus.publish(topics.ledger_append("test"), e) for e in events))


async def stream_messages(bus: Bus, stream: str) -> list[bytes]:
    """Every message a JetStream stream holds, oldest first."""
    info = await bus.js.stream_info(stream)
    out: list[bytes] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await bus.js.get_msg(stream, seq)
        if msg.data is not None:
            out.append(msg.data)
    return out


async def owner_inputs(bus: Bus) -> list[UserInput]:
    """The agent's inputs the AGENT stream holds, oldest first: each the owner's own message (a
    regenerate, activation or idle check among them fails the test)."""
    inputs: list[UserInput] = []
    for raw in await stream_messages(bus, "AGENT"):
        message = topics.AGENT_INPUT.decode(raw)
        assert isinstance(message, UserInput), message
        inputs.append(message)
    return inputs


class StallingClient:
    """A /chat client that reads its socket only when asked: a browser tab frozen mid-stream.

    Built on websockets' sans-I/O protocol over a plain socket with a small receive buffer, so
    nothing (no library read-ahead) drains the socket behind the test's back.
    """

    def __init__(self, url: str, rcvbuf: int = 4096) -> None:
        self.uri = parse_uri(url)
        self.rcvbuf = rcvbuf
        self.proto = ClientProtocol(self.uri, max_size=None)
        self.sock = socket.socket()
        self.close_code: int | None = None

    async def open(self) -> "StallingClient":
        loop = asyncio.get_running_loop()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.rcvbuf)
        self.sock.setblocking(False)
        await loop.sock_connect(self.sock, (self.uri.host, self.uri.port))
        self.proto.send_request(self.proto.connect())
        await self._flush()
        while self.proto.handshake_exc is None and self.proto.state is State.CONNECTING:
            self.proto.receive_data(await loop.sock_recv(self.sock, 65536))
        if self.proto.handshake_exc is not None:
            raise self.proto.handshake_exc
        return self

    async def _flush(self) -> None:
        for data in self.proto.data_to_send():
            if data:
                await asyncio.get_running_loop().sock_sendall(self.sock, data)

    async def send(self, frame: dict[str, Any]) -> None:
        self.proto.send_text(json.dumps(frame).encode())
        await self._flush()

    async def drain(self, timeout: float = 30.0) -> list[dict[str, Any]]:
        """Read everything up to the server's close; the frames, in order."""
        loop = asyncio.get_running_loop()
        frames: list[dict[str, Any]] = []
        while self.close_code is None:
            data = await asyncio.wait_for(loop.sock_recv(self.sock, 65536), timeout)
            if not data:
                break
            self.proto.receive_data(data)
            for event in self.proto.events_received():
                if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                    frames.append(json.loads(bytes(event.data)))
            if self.proto.close_rcvd is not None:
                self.close_code = self.proto.close_rcvd.code
                # Our half of the closing handshake; a server that failed the connection (a
                # keepalive timeout) has closed its side without waiting for it.
                with contextlib.suppress(ConnectionError):
                    await self._flush()
        return frames

    def close(self) -> None:
        self.sock.close()
