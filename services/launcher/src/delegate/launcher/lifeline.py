"""Children that die with their launcher: Linux's parent-death signal, set in the child.

A launcher that is SIGKILLed runs no cleanup, so without this its eight services and their
nats-server would run on, orphaned, until someone finds them. ``PR_SET_PDEATHSIG`` asks the
kernel to send the child SIGTERM when the thread that forked it ends; the launcher forks from
its main thread only, so that is when the launcher ends. The child then stops as on any
SIGTERM (within its stop grace, `delegate.runtime.service`).
"""

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that arms the parent-death signal, or None where Linux's prctl is absent."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec: nothing here may take a lock
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        # The parent may have died between fork and prctl: the signal would never come then.
        if os.getppid() != parent:
            os._exit(1)

    return arm
