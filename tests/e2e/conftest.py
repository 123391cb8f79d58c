"""The end-to-end tests share the run's one OpenAI stand-in (tests/conftest.py), reset per test."""

import pytest

from tests.support.standin import StandinProcess


@pytest.fixture
def standin(shared_standin: StandinProcess) -> StandinProcess:
    shared_standin.reset()
    return shared_standin
