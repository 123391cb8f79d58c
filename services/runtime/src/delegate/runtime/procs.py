"""Moved to ``delegate.launcher.procs``: the launcher member owns child processes and nats-server.

Transitional: this re-export keeps test and bench imports working in the dev venv (where the
launcher is installed) until they import from the new place; no service may import it.
"""

from delegate.launcher.procs import (
    ManagedProcess,
    NatsServer,
    free_port,
    nats_server_binary,
    python_module,
    wait_for_port,
)

__all__ = ["ManagedProcess", "NatsServer", "free_port", "nats_server_binary", "python_module", "wait_for_port"]
