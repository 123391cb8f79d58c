"""Settings OpenAI would refuse stop the start of the service that passes them through, with a
message naming the variable: the real service processes, started as `make run` starts them."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from delegate.runtime.settings_check import EX_CONFIG

pytestmark = pytest.mark.integration  # starts processes

# No NATS listens here: a service that got past its settings would wait for the bus, not exit.
NO_BUS = "nats://127.0.0.1:9"


def _start(module: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m module`` in a folder without `.env`, with ``env`` on top of a clean environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACT_", "REALTIME_", "NATS_", "OPENAI_"))}
    try:
        return subprocess.run(
            [sys.executable, "-m", module], cwd=tmp_path, env={**base, "NATS_URL": NO_BUS, **env},
            capture_output=True, text=True, timeout=60,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"{module} did not refuse to start: {exc.stderr!r}") from exc


@pytest.mark.parametrize("module", ["delegate.agent", "delegate.inner_plane"])
def test_compact_threshold_below_the_api_minimum_stops_the_start(module: str, tmp_path: Path) -> None:
    done = _start(module, tmp_path, COMPACT_THRESHOLD="600")
    assert done.returncode == EX_CONFIG, done.stderr
    assert "refuses to start: COMPACT_THRESHOLD=600: input should be greater than or equal to 1000" in done.stderr
    assert "compact_threshold below 1000" in done.stderr  # why: the API's own bound
    assert "Traceback" not in done.stderr


def test_retention_ratio_outside_0_to_1_stops_the_voice_start(tmp_path: Path) -> None:
    done = _start("delegate.voice", tmp_path, REALTIME_RETENTION_RATIO="1.5")
    assert done.returncode == EX_CONFIG, done.stderr
    refused = "voice refuses to start: REALTIME_RETENTION_RATIO=1.5: input should be less than or equal to 1"
    assert refused in done.stderr


def test_every_refused_value_is_named_at_once(tmp_path: Path) -> None:
    done = _start("delegate.agent", tmp_path, COMPACT_THRESHOLD="999", CAPSULE_THRESHOLD="1.5")
    assert done.returncode == EX_CONFIG
    assert "COMPACT_THRESHOLD=999" in done.stderr and "CAPSULE_THRESHOLD=1.5" in done.stderr


def test_the_api_minimum_itself_is_accepted(tmp_path: Path) -> None:
    probe = (
        "from delegate.agent.settings import Settings as A; from delegate.inner_plane.settings import Settings as I;"
        "from delegate.voice.settings import Settings as V;"
        "print(A().compact_threshold, I().compact_threshold, V().realtime_retention_ratio)"
    )
    env = {**os.environ, "COMPACT_THRESHOLD": "1000", "REALTIME_RETENTION_RATIO": "0"}
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         check=True, timeout=60)
    assert out.stdout.split() == ["1000", "1000", "0.0"]
