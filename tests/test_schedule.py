"""The file order of `make test`: longest first, by the measured table or else by the tests' marks,
and xdist keeps it (it would put the files with the most tests first)."""

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.schedule import PLAIN_TEST_S, PROCESS_TEST_S, TABLE, estimate, load_table, longest_first

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Item:
    """What the ordering reads of a collected test: its node id and its marks."""

    nodeid: str
    marks: set[str] = field(default_factory=set)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.marks else None


def test_files_run_longest_first_and_keep_their_tests_in_order() -> None:
    items = [Item("a.py::one"), Item("a.py::two"), Item("b.py::one"), Item("c.py::one"), Item("c.py::two")]
    weights = {"a.py": 5.0, "b.py": 40.0, "c.py": 5.0}
    ordered = longest_first(items, weights)  # type: ignore[arg-type]
    assert [i.nodeid for i in ordered] == ["b.py::one", "a.py::one", "a.py::two", "c.py::one", "c.py::two"]


def test_a_file_missing_from_the_table_is_estimated_from_its_marks() -> None:
    items = [Item("known.py::t"), Item("new.py::a", {"integration"}), Item("new.py::b"),
             Item("browser.py::a", {"browser"}), Item("plain.py::a"), Item("plain.py::b")]
    weights = estimate(items, {"known.py": 12.5})  # type: ignore[arg-type]
    assert weights == {"known.py": 12.5, "new.py": PROCESS_TEST_S + PLAIN_TEST_S, "browser.py": PROCESS_TEST_S,
                       "plain.py": 2 * PLAIN_TEST_S}


def test_the_checked_in_table_is_seconds_by_test_file() -> None:
    # A name gone stale (a file renamed or removed) is harmless: nothing collected matches it.
    table = load_table(ROOT / TABLE)
    assert table, "tests/file-seconds.json is missing or empty"
    assert all(name.startswith("tests/") and name.endswith(".py") and seconds >= 0 for name, seconds in table.items())


PLENTY = "\n".join(f"def test_quick_{n}():\n    assert {n} == {n}\n" for n in range(6))
FEW = '''
import pytest

@pytest.mark.integration
def test_starts_processes():
    assert True
'''
CONFTEST = '''
pytest_plugins = ["tests.support.lanes", "tests.support.schedule"]

def pytest_configure(config):
    config.addinivalue_line("markers", "integration: starts processes")
'''


@pytest.mark.integration  # runs pytest with xdist in a child process
def test_xdist_keeps_the_order_instead_of_putting_the_most_tests_first(tmp_path: Path) -> None:
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "conftest.py").write_text(CONFTEST)
    (probe / "test_plenty.py").write_text(PLENTY)
    (probe / "test_few.py").write_text(FEW)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1", "--dist", "loadfile", "-v",
         "-o", "addopts=", "--rootdir", str(probe), str(probe)],
        cwd=probe, capture_output=True, text=True, timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert run.returncode == 0, run.stdout + run.stderr
    ran = re.findall(r"PASSED (test_\w+\.py)::", run.stdout)
    assert ran[:1] == ["test_few.py"] and ran.count("test_plenty.py") == 6, run.stdout
