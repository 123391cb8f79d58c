"""One service inside a host: its own settings, stop, log name and restarts."""

import asyncio
import contextlib
import importlib
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from types import ModuleType
from typing import Any

from delegate.runtime import without_unused_extras
from delegate.runtime.logs import SERVICE_NAME
from delegate.runtime.retry import Backoff
from delegate.runtime.settings import ServiceSettings
from delegate.runtime.settings_check import load_settings
from delegate.runtime.settings_source import password_variable

from .catalog import NEEDS_CLICK, module_of

log = logging.getLogger("delegate.host")

# A run that lasted this long was a success: the next failure starts the backoff afresh.
HEALTHY_RUN_S = 60.0
DEFAULT_STOP_GRACE_S = 3.5  # STOP_GRACE_S's default (`delegate.runtime.settings`)

Serve = Callable[[Any, asyncio.Event], Awaitable[None]]


def identity(role: str, environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings that make a service log in as its own role: the launcher gives a host one
    password variable per service it runs (NATS_PASSWORD_AGENT, ...), as for an external server."""
    password = environ.get(password_variable(role))
    return {} if password is None else {"nats_user": role, "nats_password": password}


def import_service(name: str) -> ModuleType:
    """The service's module, imported as its own ``__main__`` imports it: the SDKs it uses
    without their unused parts."""
    with contextlib.nullcontext() if name in NEEDS_CLICK else without_unused_extras():
        return importlib.import_module(module_of(name))


class Hosted:
    def __init__(self, name: str, settings: ServiceSettings | Any, serve: Serve) -> None:
        self.name = name
        self.settings = settings
        self.serve = serve
        self.stop = asyncio.Event()
        self.starts = 0
        # The stand-in's settings are not a service's: it stops within the default grace.
        self.stop_grace_s: float = getattr(settings, "stop_grace_s", DEFAULT_STOP_GRACE_S)

    @classmethod
    def load(cls, name: str, environ: Mapping[str, str] = os.environ) -> "Hosted":
        """Import the service's module and read its settings, once, here at the edge; a setting
        it refuses raises ``SettingsRefused`` (the host exits EX_CONFIG, as the service would)."""
        module = import_service(name)
        factory = module.Settings
        overrides = identity(name, environ)
        settings = load_settings(name, lambda: factory(**overrides))
        return cls(name, settings, module.serve)

    async def run(self) -> None:
        """``serve`` until stopped; a failure (an exception, a ``SystemExit`` that in a process
        of its own would have ended it, or a return nobody asked for) starts it again after a
        backoff, and touches no other service of the host."""
        # Set in this task's own context: every line the service logs, from any task or thread
        # it starts, carries its name.
        SERVICE_NAME.set(self.name)
        loop = asyncio.get_running_loop()
        backoff = Backoff(initial=0.5, maximum=30.0)
        while not self.stop.is_set():
            began = loop.time()
            self.starts += 1
            log.info("starting (start %d)", self.starts)
            try:
                await self.serve(self.settings, self.stop)
            except asyncio.CancelledError:
                raise
            except (Exception, SystemExit) as exc:
                if self.stop.is_set():
                    log.warning("failed while stopping: %r", exc)
                    return
                log.error("failed; restarting it", exc_info=exc)
            else:
                if self.stop.is_set():
                    log.info("stopped")
                    return
                log.error("ended by itself; restarting it")
            if loop.time() - began > HEALTHY_RUN_S:
                backoff.reset()
            await backoff.sleep(self.stop)
