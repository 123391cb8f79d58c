"""A tool configuration file the agent cannot read stops it with an error naming file and line."""


import pytest

from tests.support.system import System
from tests.support.waiting import eventually_sync

pytestmark = pytest.mark.integration


def test_bad_policy_json_stops_the_agent_with_file_and_line(system: System) -> None:
    # The model is never reached: the agent must stop before its first turn.
    system.extra_env.update(OPENAI_API_KEY="unused", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    system.runtime.mkdir(parents=True)
    broken = '{\n  "agents": {\n    "base": {"allow_tags": ["local",]}\n}}\n'  # trailing comma, line 3
    (system.runtime / "agent-policies.json").write_text(broken)
    system.start("ledger")
    agent = system.start_one("agent")
    eventually_sync(lambda: not agent.alive(), "the agent to stop on a broken policy file")
    assert agent.proc is not None and agent.proc.returncode != 0
    log = agent.log_text()
    assert "agent-policies.json" in log and "line 3" in log
    assert agent.proc.returncode == 2 and "Traceback" not in log
