"""Stdlib logging with the service name on every line."""

import logging
import sys


def configure_logging(service: str, level: str = "INFO") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter(f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # nats-py logs every reconnect attempt at INFO; keep our own lines readable.
    logging.getLogger("nats").setLevel(logging.WARNING)
    # httpx/httpx2 (GitHub tools, the MCP and openai SDKs) log every request at INFO: MCP probes
    # alone would fill the log.
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpx2").setLevel(logging.WARNING)
