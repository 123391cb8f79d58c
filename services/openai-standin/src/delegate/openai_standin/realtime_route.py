"""`WS /v1/realtime?model=…`: the handshake (Bearer auth, or 401 before accept), the
first `session.created`, then the connection until either side leaves.

A scripted `disconnect_after_deltas` ends the socket the hard way: the handler raises,
and uvicorn closes the TCP connection with no close frame (the client sees 1006)."""

import asyncio
import contextlib
import logging
import time

from fastapi import APIRouter, WebSocket
from fastapi.responses import JSONResponse

from delegate.openai_standin.errors import missing_api_key
from delegate.openai_standin.realtime import audio, session
from delegate.openai_standin.realtime.connection import RealtimeConnection
from delegate.openai_standin.realtime.wire import server_event
from delegate.openai_standin.state import StandinState
from delegate.openai_standin.streaming import StreamDropped

log = logging.getLogger(__name__)

DEFAULT_MODEL = "gpt-realtime"

router = APIRouter()


class SocketDropped(StreamDropped):
    """A scripted abrupt end of a Realtime socket (kept out of the crash log like
    the HTTP stream drops)."""


def _api_key(websocket: WebSocket) -> str:
    scheme, _, key = websocket.headers.get("authorization", "").partition(" ")
    return key.strip() if scheme.lower() == "bearer" else ""


@router.websocket("/v1/realtime")
async def realtime(websocket: WebSocket) -> None:
    state: StandinState = websocket.app.state.standin
    key = _api_key(websocket)
    if not key:
        error = missing_api_key()
        await websocket.send_denial_response(JSONResponse(error.body(), status_code=error.status))
        return
    model = websocket.query_params.get("model") or DEFAULT_MODEL
    await websocket.accept()
    config = session.default_session(model)
    record = state.realtime.log.open(config["id"], model)
    demo = state.settings.demo_for(key)
    connection = RealtimeConnection(
        websocket,
        config,
        record,
        state.realtime.script,
        pace=state.settings.standin_realtime_pace,
        demo=demo,
        speak=demo and audio.espeak_available(),
    )
    log.info("realtime session %s opened (model %s)", config["id"], model)
    try:
        await connection.send(server_event("session.created", session=config))
        receiver = asyncio.create_task(connection.receive_loop())
        dropped = asyncio.create_task(connection.dropped.wait())
        try:
            await asyncio.wait({receiver, dropped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (receiver, dropped):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if connection.dropped.is_set():
            raise SocketDropped(connection.drop_reason)
    finally:
        await connection.close()
        record.closed_at = time.time()
        log.info("realtime session %s closed", config["id"])
