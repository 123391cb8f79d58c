"""Delegate's shared contracts: what crosses a process boundary, spelled once.

Pure data (pydantic models, subject names, stream specs, cursors); nothing here
opens a socket, so tests, the gateway and schema exports import it freely.

The public surface is the modules in ``__all__``: what a service may import. ``text`` is
internal (the contracts' own validators). tests/contracts/test_public_surface.py fails when the
surface changes and its snapshot does not, or when a service imports past the surface.
"""

__all__ = [
    "budget",
    "calendar",
    "channels",
    "cursor",
    "events",
    "ids",
    "ledger_events",
    "limits",
    "memory",
    "messages",
    "people",
    "push",
    "reminders",
    "roles",
    "signals",
    "streams",
    "subjects",
    "tasks",
    "topics",
    "usage",
    "voice",
    "ws",
]
