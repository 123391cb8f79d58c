"""Keep the owner token out of log files, wherever it could slip in.

Servers log WebSocket URLs with their query string (``/chat?token=…``), and an exception's
message may quote whatever it was handed. Every record passes through ``RedactTokens``: the
query parameter and the token itself (when known) become ``***``.
"""

import logging
import re
from typing import Any

_TOKEN_IN_QUERY = re.compile(r"([?&]token=)[^&\s\"']+")


class RedactTokens(logging.Filter):
    def __init__(self, secret: str | None = None) -> None:
        super().__init__()
        self.secret = secret

    def _redact(self, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        value = _TOKEN_IN_QUERY.sub(r"\1***", value)
        return value.replace(self.secret, "***") if self.secret else value

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg = self._redact(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(self._redact(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: self._redact(v) for k, v in record.args.items()}
        if self.secret and record.exc_info and record.exc_text is None:
            # Render the traceback now, so the redaction covers it too.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if self.secret and record.exc_text:
            record.exc_text = record.exc_text.replace(self.secret, "***")
        return True


def install_secret_redaction(secret: str | None = None) -> None:
    """On uvicorn's loggers (their own records) and on every root handler (everyone else's)."""
    for name in ("uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.filters[:] = [f for f in logger.filters if not isinstance(f, RedactTokens)]
        logger.addFilter(RedactTokens(secret))
    for handler in logging.getLogger().handlers:
        handler.filters[:] = [f for f in handler.filters if not isinstance(f, RedactTokens)]
        handler.addFilter(RedactTokens(secret))
