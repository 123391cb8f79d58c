"""Runs the browser client's JavaScript unit tests (Node's built-in runner) under pytest."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration  # starts processes

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def test_client_js_unit_tests_pass() -> None:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI"):
            pytest.fail("node is not installed: the client's JS unit tests cannot run")
        pytest.skip("node is not installed")
    # Explicit files: how `node --test <dir>` treats a directory changed between Node versions.
    files = sorted(str(p.relative_to(ROOT)) for p in HERE.glob("*.test.mjs"))
    assert files, "no JS test files found"
    proc = subprocess.run(
        [node, "--test", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"node --test failed:\n{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    assert "# fail 0" in proc.stdout
