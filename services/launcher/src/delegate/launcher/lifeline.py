"""Children that die with their launcher: Linux's parent-death signal, set in the child.

A launcher that is SIGKILLed runs no cleanup, so without this its eight services and their
nats-server would run on, orphaned, until someone finds them. ``PR_SET_PDEATHSIG`` asks the
kernel to signal the child when the thread that forked it ends; the launcher forks from its
main thread only, so that is when the launcher ends.

The signal is SIGKILL, not SIGTERM: the private nats-server gets it at the same instant, so a
graceful stop could only wait on a bus that is gone until its watchdog ended it (measured 7.7 s
with a 12 s grace). A kill is the crash every service survives by design (nothing acked is
lost, no side effect repeats); a grandchild follows its parent the same way (the ledger's writer
sees its stdin close, Chromium's driver its pipe).
"""

import ctypes
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that arms the parent-death signal, or None where Linux's prctl is absent."""
    if not sys.platform.startswith("linux"):
        return None
    # The interpreter's own symbols, libc's among them: ctypes.util.find_library("c") ran
    # ``ldconfig -p`` in a child process for every child started, 0.03-0.2 s each before the
    # host could start.
    libc = ctypes.CDLL(None, use_errno=True)
    parent = os.getpid()

    def arm() -> None:  # runs in the child between fork and exec: nothing here may take a lock
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        # The parent may have died between fork and prctl: the signal would never come then.
        if os.getppid() != parent:
            os._exit(1)

    return arm
