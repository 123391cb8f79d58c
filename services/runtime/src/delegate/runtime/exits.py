"""Ending a process whose stop is complete, without the interpreter's teardown.

Its own module, importing only the standard library: the ledger's writer process ends this way
too, and importing it from ``service`` brought the settings, the NATS identity and the role
table into a process that never reads them.
"""

import contextlib
import logging
import os
import sys


def exit_now(code: int) -> None:
    """End the process once its stop is complete, skipping the interpreter's teardown.

    Nothing is left to do by then (every connection closed, every file written), but tearing
    down a process that imported a service's code (one host: every service's) costs seconds of
    CPU on a loaded machine, measured 2.5 s, which the stop budget then lacks. Called inside the
    ``asyncio.Runner`` block: its close joins the default executor's threads, and one may be
    importing a library a service loads lazily (the agent's OpenAI SDK once it leads: seconds on
    a loaded machine), which nobody awaits any more; a SIGTERM then took the whole grace."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
