"""`make run` with a setting OpenAI would refuse: the system stops and says which, instead of
restarting the service that refused it forever."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from delegate.launcher.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_compact_threshold_below_the_api_minimum_stops_make_run_with_the_message(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "TWILIO_", "IMAP_", "SMTP_"))}
    env.update(DELEGATE_PORT=str(free_port()), RUNTIME_DATA_DIR=str(tmp_path / "rt"), COMPACT_THRESHOLD="600")
    env.pop("DELEGATE_TOKEN", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "delegate.launcher"], env=env, cwd=tmp_path, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, text=True,
    )
    try:
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == os.EX_CONFIG, out
    assert "refuses to start: COMPACT_THRESHOLD=600: input should be greater than or equal to 1000" in out
    assert "restarting" not in out  # the refusal is not mistaken for a crash
    assert "stopped in" in out  # what had started was stopped in order
