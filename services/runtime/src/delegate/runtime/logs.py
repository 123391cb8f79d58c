"""Stdlib logging with the service name on every line.

A process may host several services (``delegate.host``): the name on a line is then the one
of the service whose task logged it (``SERVICE_NAME``, a context variable each hosted service
sets in its own task; the tasks and threads it starts inherit it), else the process's own.
"""

import logging
import sys
from contextvars import ContextVar

SERVICE_NAME: ContextVar[str | None] = ContextVar("delegate_service_name", default=None)


class ServiceName(logging.Filter):
    """Puts ``record.service``: the hosted service logging, else ``default``."""

    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        record.service = SERVICE_NAME.get() or self.default
        return True


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ServiceName(service))
    handler.setFormatter(logging.Formatter("%(asctime)s %(service)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # nats-py logs every reconnect attempt at INFO; keep our own lines readable.
    logging.getLogger("nats").setLevel(logging.WARNING)
    # httpx/httpx2 (GitHub tools, the MCP and openai SDKs) log every request at INFO: MCP probes
    # alone would fill the log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
