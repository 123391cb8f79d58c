"""Fixtures for the inner plane: a real stand-in process beside the shared ``system`` fixture."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.standin import StandinProcess


@pytest.fixture
def standin(tmp_path: Path) -> Iterator[StandinProcess]:
    process = StandinProcess(log_dir=tmp_path / "standin").start()
    yield process
    process.stop()
