"""Fixtures for the inner plane: a real stand-in process beside the shared ``system`` fixture."""


import pytest

from tests.support.standin import StandinProcess


@pytest.fixture
def standin(shared_standin: StandinProcess) -> StandinProcess:
    """The run's one stand-in (tests/conftest.py), reset: no script, no recorded requests."""
    shared_standin.reset()
    return shared_standin
