"""``python -m tests.support.child_probe [code|wait]``: prints what a started process sees of
itself (one JSON line), then exits with ``code`` or waits for a signal (tests/test_forked.py)."""

import json
import os
import signal
import sys

if __name__ == "__main__":
    sys.stdout.write(json.dumps({
        "argv": sys.argv[1:],
        "name": __name__,
        "pid": os.getpid(),
        "parent": os.getppid(),
        "session_leader": os.getsid(0) == os.getpid(),
        "cwd": os.getcwd(),
        "probe": os.environ.get("PROBE"),
        "home": os.environ.get("HOME"),
        "preloaded": "delegate.gateway.main" in sys.modules,
    }) + "\n")
    sys.stderr.write("to stderr\n")
    if sys.argv[1:] == ["wait"]:
        signal.pause()
    sys.exit(int(sys.argv[1]) if sys.argv[1:] else 0)
