"""The /chat WebSocket: JSON text frames, one reader, one writer, one hub outbox per connection.

Client frames are validated one at a time, in order; a bad frame gets an ``error``
frame with a stable code and the connection stays open. Everything the server
sends goes through the connection's outbox (see ``fanout``), written by one task.
"""

import asyncio
import contextlib
import json
import logging
from typing import Any

from fastapi import APIRouter, WebSocket
from pydantic import ValidationError

from delegate.contracts import topics, ws
from delegate.contracts.messages import AgentCommand, QueryRequest
from delegate.runtime.bus import BusUnavailable, RemoteError
from delegate.runtime.retry import sleep_unless

from .auth import SESSION_COOKIE
from .deps import GatewayContext
from .fanout import REPLAY_PAGE, ChatClient, frame, state_frame
from .inputs import InputRejected, message_problem
from .sign_in import SessionsUnavailable
from .turns import regenerate_turn, stop_turn, submit_edit_or_message

log = logging.getLogger(__name__)

router = APIRouter()

CLOSE_UNAUTHORIZED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_TRY_LATER = 1013
CLOSE_POLICY = 1008
KNOWN_TYPES = ("message", "compact", "end_conversation", "stop", "regenerate", "hello", "ping")
STATE_TIMEOUT_S = 1.0


def error(code: str, message: str, **extra: Any) -> str:
    return json.dumps(ws.error_frame(code, message, **extra))


def _frame_problem(exc: ValidationError) -> tuple[str, str]:
    problem = message_problem(exc)  # the text rules, worded as over REST
    if problem is not None:
        return problem.code, problem.message
    errors = exc.errors()
    if not errors:
        return "bad_frame", "the frame is not valid"
    where = ".".join(str(p) for p in errors[0]["loc"][1:]) or "frame"
    return "bad_frame", f"{where}: {errors[0]['msg']}"


@router.websocket("/chat")
async def chat(websocket: WebSocket) -> None:
    ctx: GatewayContext = websocket.app.state.ctx
    await websocket.accept()
    proof = await owner_proof(websocket, ctx)
    if proof is None:
        return
    session_id = websocket.cookies.get(SESSION_COOKIE) if proof == "cookie" else None
    await ChatConnection(websocket, ctx, session_id).run()


async def owner_proof(websocket: WebSocket, ctx: GatewayContext) -> str | None:
    """How an accepted browser socket proved it is the owner's (``cookie``, ...), or None after
    refusing it with the contract's close code (every browser WebSocket is signed in the same way)."""
    try:
        proof = await ctx.auth.authenticate(
            websocket.headers, websocket.cookies, websocket.query_params.get("token")
        )
    except SessionsUnavailable:
        await _refuse(websocket, CLOSE_TRY_LATER, "bus_unavailable", "sign-in sessions cannot be checked right now")
        return None
    if proof is None:
        await _refuse(websocket, CLOSE_UNAUTHORIZED, "unauthorized", "a valid owner token is required")
        return None
    if proof == "cookie" and not ctx.auth.origin_allowed(websocket.headers):
        await _refuse(websocket, CLOSE_FORBIDDEN, "forbidden_origin", "this page's origin may not use the session")
        return None
    return proof


async def _refuse(websocket: WebSocket, code: int, reason: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await websocket.send_text(error(reason, message))
        await websocket.close(code, reason)


class ChatConnection:
    """One /chat connection. ``session_id``: the browser session it was opened with, if any."""

    def __init__(self, websocket: WebSocket, ctx: GatewayContext, session_id: str | None = None) -> None:
        self.ws = websocket
        self.ctx = ctx
        self.session_id = session_id
        self.client: ChatClient = ctx.hub.attach()
        peer = websocket.client
        self.label = f"{self.client.label} {peer.host}:{peer.port}" if peer else self.client.label
        self._tasks: set[asyncio.Task[None]] = set()
        self._grace: asyncio.Task[None] | None = None
        # One compact and one end_conversation in flight per connection: a client repeating the
        # frame gets "busy" instead of one more waiting task each time.
        self._commands: dict[str, asyncio.Task[None]] = {}

    def _spawn(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def run(self) -> None:
        log.info("chat %s connected", self.label)
        writer = asyncio.create_task(self._write_loop())
        reader = asyncio.create_task(self._read_loop())
        watchdog = self._spawn(self._close_watchdog(writer))
        self._grace = self._spawn(self._hello_grace())
        self._spawn(self._send_state())
        if self.session_id is not None:
            self._spawn(self._end_with_the_session(self.session_id))
        try:
            await asyncio.wait({writer, reader}, return_when=asyncio.FIRST_COMPLETED)
            if reader.done() and not writer.done():
                if self.client.closing:
                    await asyncio.wait({writer})  # the watchdog bounds this
                else:
                    writer.cancel()  # the client went away
        finally:
            self.ctx.hub.detach(self.client)
            for task in (reader, writer, watchdog, *self._tasks):
                task.cancel()
            await asyncio.gather(reader, writer, *self._tasks, return_exceptions=True)
            if reader.done() and not reader.cancelled() and reader.exception() is not None:
                log.error("chat %s reader failed", self.label, exc_info=reader.exception())
            log.info("chat %s closed (%s)", self.label, self.client.close_reason or "client left")

    # ---- writing ------------------------------------------------------------------------------

    async def _write_loop(self) -> None:
        try:
            while (text := await self.client.next_frame()) is not None:
                await self.ws.send_text(text)
            await self.ws.close(self.client.close_code or 1000, self.client.close_reason[:100])
        except Exception as exc:  # the peer vanished mid-write: nothing left to tell it
            log.debug("chat %s write ended: %r", self.label, exc)

    async def _close_watchdog(self, writer: asyncio.Task[None]) -> None:
        """A client told to go away that reads nothing must not be held by the hub forever.

        Its writer waits for the socket to take the frames queued before the close (the outbox
        holds nothing more: overflow emptied it), so holding on costs little, and cutting the
        connection would lose the resync frame and the 4408 a client that resumes reading is
        owed (it would see a bare 1006). So first the hub lets it go; the connection itself is
        cut only much later, when the keepalive has long closed it with 1011 (uvicorn writes that
        close frame itself) and the socket still has not taken it.
        """
        await self.client.closing_event.wait()
        settings = self.ctx.settings
        await asyncio.wait({writer}, timeout=settings.gateway_ws_lag_close_s)
        if writer.done():
            return
        log.info("chat %s is not reading its frames: the hub lets it go", self.label)
        self.ctx.hub.detach(self.client)
        await asyncio.wait({writer}, timeout=max(0.0, settings.gateway_ws_drop_s - settings.gateway_ws_lag_close_s))
        if not writer.done():
            log.info("chat %s never took its close frame: dropping it", self.label)
            writer.cancel()

    async def _end_with_the_session(self, session_id: str) -> None:
        """Signing out (here, on another gateway, or everywhere) also ends the sockets it opened.

        Checked every GATEWAY_SESSION_RECHECK_S rather than watched: "sign out everywhere" purges
        the bucket, which a KV watcher is never told about.
        """
        while await sleep_unless(self.client.closing_event, self.ctx.settings.gateway_session_recheck_s):
            try:
                if await self.ctx.auth.sessions.check(session_id):
                    continue
            except SessionsUnavailable:
                continue  # NATS is away: not a sign-out
            log.info("chat %s: its session was signed out", self.label)
            self.client.send(error("unauthorized", "this session was signed out"))
            self.client.close(CLOSE_UNAUTHORIZED, "signed out")
            return

    # ---- reading ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        while True:
            message = await self.ws.receive()
            if message["type"] == "websocket.disconnect":
                return
            text = message.get("text")
            if text is None:
                self.client.send(error("bad_frame", "binary frames are not accepted on /chat"))
                continue
            try:
                await self._handle(text)
            except Exception:
                log.exception("chat %s: frame handling failed", self.label)
                self.client.send(error("internal", "the gateway failed to handle that frame"))

    async def _handle(self, text: str) -> None:
        # Size first, on the raw text: never parse what we would refuse anyway.
        if len(text) > ws.MAX_FRAME_BYTES or len(text.encode()) > ws.MAX_FRAME_BYTES:
            self.client.send(error("too_large", f"a frame may be at most {ws.MAX_FRAME_BYTES} bytes"))
            return
        try:
            data = json.loads(text)
        except ValueError:
            self.client.send(error("bad_json", "the frame is not valid JSON"))
            return
        except RecursionError:  # ~1,000 nested arrays: a client error, not a crash of the handler
            log.info("chat %s sent a frame nested too deeply", self.label)
            self.client.send(error("bad_json", "the frame is nested too deeply"))
            return
        if not isinstance(data, dict) or not isinstance(data.get("type"), str):
            self.client.send(error("bad_frame", 'a frame is a JSON object with a string "type"'))
            return
        kind = data["type"]
        if kind not in KNOWN_TYPES:
            self.client.send(error("unknown_type", f"unknown frame type {kind[:40]!r}", known=list(KNOWN_TYPES)))
            return
        client_msg_id = data.get("client_msg_id") if isinstance(data.get("client_msg_id"), str) else None
        turn_id = data.get("turn_id") if isinstance(data.get("turn_id"), str) else None
        try:
            parsed = ws.CLIENT_MESSAGE.validate_python(data, strict=True)
        except ValidationError as exc:
            code, message = _frame_problem(exc)
            extra = {
                "request": kind,
                **({"client_msg_id": client_msg_id} if client_msg_id else {}),
                **({"turn_id": turn_id[:64]} if turn_id and kind in ("stop", "regenerate") else {}),
            }
            self.client.send(error(code, message, **extra))
            return
        if isinstance(parsed, ws.SendMessage):
            await self._message(parsed)
        elif isinstance(parsed, ws.Stop | ws.Regenerate):
            # Its own task: a stop must not wait behind a regenerate's ledger checks.
            self._spawn(self._turn_control(parsed.type, parsed.turn_id))
        elif isinstance(parsed, ws.Hello):
            await self._hello(parsed.after_seq)
        elif isinstance(parsed, ws.PingFrame):
            self.client.send(frame("pong"))
        elif isinstance(parsed, ws.Compact):
            self._start_command("compact")
        else:
            self._start_command("end_conversation")

    def _start_command(self, which: str) -> None:
        running = self._commands.get(which)
        if running is not None and not running.done():
            self.client.send(error("busy", f"a {which} request is already in flight", request=which))
            return
        self._commands[which] = self._spawn(self._command(which))

    async def _message(self, msg: ws.SendMessage) -> None:
        extra = {"request": "message", **({"client_msg_id": msg.client_msg_id} if msg.client_msg_id else {})}
        bus = self.ctx.bus
        if bus is None:
            self.client.send(error("bus_unavailable", "the gateway is not connected to NATS; send it again", **extra))
            return
        try:
            done = await submit_edit_or_message(bus, msg)
        except InputRejected as exc:
            self.client.send(error(exc.code, exc.message, **extra))
            return
        except BusUnavailable:
            self.client.send(error("bus_unavailable", "the message could not be stored; send it again", **extra))
            return
        self.client.send(
            frame("ack", request="message", client_msg_id=msg.client_msg_id, event_id=done.event_id,
                  duplicate=done.duplicate)
        )

    async def _turn_control(self, which: str, turn_id: str) -> None:
        """``stop`` or ``regenerate`` of the turn ``turn_id``: an ack, or an error with a stable code."""
        extra = {"request": which, "turn_id": turn_id}
        bus = self.ctx.bus
        try:
            if bus is None:
                raise BusUnavailable("not connected")
            if which == "stop":
                await stop_turn(bus, turn_id)
            else:
                await regenerate_turn(bus, turn_id)
        except InputRejected as exc:
            self.client.send(error(exc.code, exc.message, **extra))
            return
        except BusUnavailable:
            self.client.send(error("agent_unavailable", "the agent is not answering; try again", **extra))
            return
        self.client.send(frame("ack", ok=True, **extra))

    async def _command(self, which: str) -> None:
        query = topics.AGENT_COMPACT if which == "compact" else topics.AGENT_END
        bus = self.ctx.bus
        try:
            if bus is None:
                raise BusUnavailable("not connected")
            reply = await bus.request(query, AgentCommand())
        except BusUnavailable:
            self.client.send(error("agent_unavailable", "the agent is not answering", request=which))
            return
        except RemoteError as exc:
            self.client.send(error(exc.code, exc.message, request=which))
            return
        if reply.ok:
            self.client.send(frame("ack", request=which, ok=True))
        else:
            self.client.send(error("failed", f"the agent could not {which.replace('_', ' ')}", request=which))

    # ---- hello: replay from the ledger, then live --------------------------------------------

    async def _hello_grace(self) -> None:
        await asyncio.sleep(self.ctx.settings.gateway_hello_grace_s)
        self.client.go_live()

    async def _hello(self, after_seq: int) -> None:
        client = self.client
        if client.hello_too_late(after_seq):
            client.send(error("hello_late", "hello must come before live events; reconnect to resync"))
            return
        if self._grace is not None:
            self._grace.cancel()
        client.begin_replay(after_seq)
        bus = self.ctx.bus
        ledger_last = 0
        try:
            if bus is None:
                raise BusUnavailable("not connected")
            while True:
                reply = await bus.request(
                    topics.LEDGER_QUERY, QueryRequest(after_seq=client.last_seq or 0, limit=REPLAY_PAGE)
                )
                ledger_last = max(ledger_last, reply.last_seq)
                if client.last_seq is not None and reply.last_seq < client.last_seq and client.first_live_seq is None:
                    # The client has seqs this ledger never committed (its data was reset): holding
                    # back everything up to its number would hide new events, so it gets all new ones.
                    client.last_seq = reply.last_seq
                if not await client.replay(reply.events):
                    return  # closing (lagging or going away)
                if reply.more and reply.events:
                    continue
                # Live events held meanwhile must continue right after the replay; if they start
                # further on, the ledger committed more since this answer: ask again.
                if client.finish_replay(force=not reply.events):
                    break
        except (BusUnavailable, RemoteError) as exc:
            if isinstance(exc, RemoteError) and exc.code == "bad_request":
                # The ledger refused the question itself: the client's fault, and the same hello
                # would fail the same way again, so not "try again later" (1013).
                log.info("chat %s: the ledger refused hello after seq %d: %s", self.label, after_seq, exc)
                client.send(error("bad_frame", f"hello: {exc.message}", request="hello"))
                client.close(CLOSE_POLICY, "bad hello")
                return
            log.warning("chat %s: replay after seq %d failed: %s", self.label, after_seq, exc)
            client.send(error("ledger_unavailable", "the history cannot be read right now; reconnect shortly"))
            client.close(CLOSE_TRY_LATER, "ledger unavailable")
            return
        client.send(frame("ready", last_seq=client.last_seq or 0, ledger_last_seq=ledger_last))
        self._spawn(self._send_state())

    async def _send_state(self) -> None:
        bus = self.ctx.bus
        state = None
        if bus is not None:
            try:
                state = await bus.request(topics.AGENT_STATE_GET, AgentCommand(), timeout=STATE_TIMEOUT_S)
            except (BusUnavailable, RemoteError) as exc:
                log.debug("chat %s: no state from the agent: %s", self.label, exc)
        state = state or self.ctx.hub.latest_state
        if state is not None:
            self.client.send(state_frame(state, self.ctx.hub.voice.current))
