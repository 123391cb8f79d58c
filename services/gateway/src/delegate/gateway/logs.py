"""Keep the owner token out of log files: servers log WebSocket URLs with their query string."""

import logging
import re
from typing import Any

_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s\"']+")


def _redact(value: Any) -> Any:
    return _TOKEN_IN_QUERY.sub(r"\1***", value) if isinstance(value, str) else value


class RedactTokens(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = _redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact(a) for a in record.args)
        return True


def install_secret_redaction() -> None:
    """On uvicorn's loggers (access lines and "WebSocket /chat?token=… [accepted]")."""
    for name in ("uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactTokens) for f in logger.filters):
            logger.addFilter(RedactTokens())
