"""``python -m delegate.gateway``: settings -> logging -> uvicorn."""

import uvicorn

from delegate.contracts import ws
from delegate.runtime.logs import configure_logging

from .app import create_app
from .settings import Settings

# uvicorn closes a connection (1009) on a frame over this; anything between ws.MAX_FRAME_BYTES and
# this gets a polite ``too_large`` error frame and the connection stays open.
WS_MAX_MESSAGE_BYTES = 4 * 1024 * 1024


def run() -> None:
    settings = Settings()
    configure_logging(settings.instance_name or "gateway", settings.log_level)
    app = create_app(settings)
    uvicorn.run(
        app,
        host=settings.delegate_host,
        port=settings.delegate_port,
        log_config=None,  # keep configure_logging's format
        log_level=settings.log_level.lower(),
        ws_max_size=max(WS_MAX_MESSAGE_BYTES, ws.MAX_FRAME_BYTES * 2),
        timeout_graceful_shutdown=5,
        server_header=False,
    )
