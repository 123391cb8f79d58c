"""A worker that cannot go on (here: the state file cannot be written) ends the process, so its
supervisor restarts it, instead of leaving an inner plane that answers ping and does nothing."""

import shutil

import pytest

from delegate.contracts.events import Message
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import Harness, plane_env

pytestmark = [pytest.mark.integration]


async def test_a_state_file_that_cannot_be_written_stops_the_process_for_a_restart(
    system: System, standin: StandinProcess
) -> None:
    system.extra_env.update(plane_env(standin))
    system.start("ledger")
    harness = await Harness.connect(system)
    try:
        await harness.stand_in_for_the_agent()
        system.start("inner-plane", separate=("inner-plane",))
        first = await harness.append(Message(text="hello"), conversation_id="c", span_id="s", role="user")
        await harness.processed(first.seq or 0)
        # Root ignores file modes: a plain file where the state folder was fails every write.
        folder = system.runtime / "inner-plane"
        shutil.rmtree(folder)
        folder.write_text("not a folder")
        await harness.append(Message(text="again"), conversation_id="c", span_id="s", role="user")

        proc = system.procs["inner-plane"]

        async def exited() -> int | None:
            return None if proc.alive() else proc.proc.returncode if proc.proc else None

        code = await eventually(exited, "the inner plane to exit")
        assert code == 1
        assert "ended" in proc.log_text() and "stopping to be restarted" in proc.log_text()
    finally:
        await harness.close()
