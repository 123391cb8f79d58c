"""Settings a service cannot run with stop its start, with a message naming the variable.

A value OpenAI would refuse (``COMPACT_THRESHOLD`` below the API's minimum, a retention ratio
outside 0-1) would otherwise fail every turn or every call long after the start looked fine.
The service exits with ``EX_CONFIG`` instead: the launcher does not restart a service that
exits so (another try cannot help), it stops the system and shows the message.
"""

import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_settings import BaseSettings

EX_CONFIG = os.EX_CONFIG  # 78, sysexits.h: a configuration error

S = TypeVar("S", bound=BaseSettings)


class SettingsRefused(SystemExit):
    """Raised by ``load_settings``: exits with ``EX_CONFIG``; ``message`` says what is wrong."""

    def __init__(self, message: str) -> None:
        super().__init__(EX_CONFIG)
        self.message = message


def problems(exc: ValidationError, fields: dict[str, Any]) -> list[str]:
    """One line per refused value: ``NAME=value: what is wrong (why the bound exists)``."""
    lines = []
    for err in exc.errors(include_url=False):
        loc = err.get("loc") or ()
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if not loc:
            lines.append(msg)
            continue
        name = str(loc[0])
        info = fields.get(name)
        why = f" ({info.description})" if info is not None and getattr(info, "description", None) else ""
        lines.append(f"{name.upper()}={err.get('input')!s}: {msg[:1].lower()}{msg[1:]}{why}")
    return lines


def load_settings(service: str, factory: Callable[[], S]) -> S:
    """``factory()`` (a settings class), or ``SettingsRefused`` after printing why to stderr."""
    try:
        return factory()
    except ValidationError as exc:
        fields = getattr(factory, "model_fields", {})
        lines = problems(exc, fields)
        message = f"{service} refuses to start: " + "; ".join(lines)
        # Logging is not set up yet (its level is a setting too): the message goes to stderr
        # as it is, which is the service's log under `make run` and compose alike.
        sys.stderr.write(message + "\n")
        sys.stderr.flush()
        raise SettingsRefused(message) from None
