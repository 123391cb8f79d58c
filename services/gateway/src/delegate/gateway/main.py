"""``python -m delegate.gateway``: settings -> logging -> uvicorn."""

import asyncio
import contextlib
import logging
import socket
from collections.abc import Generator
from typing import Any
from urllib.parse import urlsplit

import uvicorn
from fastapi import FastAPI

from delegate.contracts import ws
from delegate.runtime.logs import configure_logging

from .app import create_app
from .settings import Settings
from .twilio_voice import CALL_PATH, public_url

log = logging.getLogger(__name__)

# uvicorn closes a connection (1009) on a frame over this, before our handler sees it; anything
# between ws.MAX_FRAME_BYTES and this gets the documented ``too_large`` error frame and the
# connection stays open. Far above the contract's limit, so that a client that overshoots it
# (a paste, a long recording) hears why; a frame is read whole before it is refused, so this is
# also what one frame may cost the gateway in memory.
WS_MAX_MESSAGE_BYTES = 16 * 1024 * 1024


# A client that reads nothing is found by the keepalive: no pong within these, and its
# connection is closed with 1011 (after any resync frame and 4408 the socket could still take).
WS_PING_INTERVAL_S = 20.0
WS_PING_TIMEOUT_S = 20.0


def uvicorn_config(app: FastAPI, settings: Settings, **overrides: Any) -> uvicorn.Config:
    """How the gateway is served; the tests serve it the same way."""
    options: dict[str, Any] = {
        "host": settings.delegate_host,
        "port": settings.delegate_port,
        "log_config": None,  # keep configure_logging's format
        "log_level": settings.log_level.lower(),
        "ws_max_size": max(WS_MAX_MESSAGE_BYTES, ws.MAX_FRAME_BYTES * 2),
        "ws_ping_interval": WS_PING_INTERVAL_S,
        "ws_ping_timeout": WS_PING_TIMEOUT_S,
        "timeout_graceful_shutdown": 5,
        "server_header": False,
        # X-Forwarded-Proto/-For count only from the proxies we are told to trust (uvicorn's own
        # default trusts 127.0.0.1, where any local program could claim https for itself).
        "proxy_headers": True,
        "forwarded_allow_ips": settings.trusted_proxies,
        **overrides,
    }
    return uvicorn.Config(app, **options)


def warn_of_a_stream_url_twilio_refuses(settings: Settings) -> None:
    """PUBLIC_BASE_URL over http:// gives calls a ws:// stream URL, which Twilio does not
    connect to (error 31922: Media Streams take wss:// only): every call would end at once."""
    stream = public_url(settings, CALL_PATH, websocket=True)
    if settings.twilio_auth_token is not None and urlsplit(stream).scheme != "wss":
        log.warning(
            "PUBLIC_BASE_URL is %s, so phone calls get the stream URL %s, which Twilio refuses (it "
            "connects Media Streams over wss:// only): set PUBLIC_BASE_URL to the https:// address "
            "Twilio reaches", settings.public_base_url, stream,
        )


class HostedServer(uvicorn.Server):
    """uvicorn inside a process that handles its own signals (``delegate.host``): ``serve``
    would otherwise take SIGINT/SIGTERM over for as long as it runs, from every service."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """The gateway as a hosted service: uvicorn on this loop until ``stop``, then its graceful
    shutdown (bounded by ``timeout_graceful_shutdown``)."""
    warn_of_a_stream_url_twilio_refuses(settings)
    server = HostedServer(uvicorn_config(create_app(settings), settings))

    async def exit_on_stop() -> None:
        await stop.wait()
        server.should_exit = True

    stopper = asyncio.create_task(exit_on_stop())
    try:
        await server.serve(sockets=[listening_socket(server.config, settings.gateway_stalled_peer_s)])
    finally:
        stopper.cancel()
    if not stop.is_set():  # startup failed (the port taken) or the server ended by itself
        raise RuntimeError("the gateway's HTTP server ended without being asked to stop")


def listening_socket(config: uvicorn.Config, stalled_peer_s: float) -> socket.socket:
    """uvicorn's own listening socket, with TCP_USER_TIMEOUT set: Linux copies it to every
    connection accepted on it, so a peer that stops reading (its window closed, our data queued)
    is dropped after ``stalled_peer_s`` instead of holding its socket and stream for ever."""
    sock = config.bind_socket()
    if hasattr(socket, "TCP_USER_TIMEOUT"):  # Linux; elsewhere the keepalives alone apply
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(stalled_peer_s * 1000))
    return sock


def run() -> None:
    settings = Settings()
    configure_logging(settings.instance_name or "gateway", settings.log_level)
    warn_of_a_stream_url_twilio_refuses(settings)
    config = uvicorn_config(create_app(settings), settings)
    uvicorn.Server(config).run(sockets=[listening_socket(config, settings.gateway_stalled_peer_s)])
