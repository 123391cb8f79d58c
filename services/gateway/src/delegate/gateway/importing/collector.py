"""The cyclic garbage collector held off while a big body is read and planned.

Reading a 50 MB body makes hundreds of thousands of short-lived objects (a parsed line, its
model, its events), none in a reference cycle: reference counting frees each. But each one
counts toward the collector's next full pass, and a full pass scans every tracked object in
the process with the GIL held: measured here, passes of 0.1-4 s while an import was read in
a worker thread, each a stall of the event loop, which a thread cannot avoid. Pausing the
collector for the read (a counter, for imports that overlap) removes those passes; nothing
the read leaves behind needs it, and it runs as before once the last read ends.
"""

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0


@contextmanager
def collector_paused() -> Iterator[None]:
    global _holders
    with _lock:
        if _holders == 0:
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0:
                gc.enable()
