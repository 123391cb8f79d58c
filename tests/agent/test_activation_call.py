"""An urgent activation phones the owner when ACTIVATION_CALLS allows it: the real voice service
places the call (the Twilio stand-in's Calls API) with the answer as its reason, and the
Realtime session it prepares (the OpenAI stand-in) is told that reason."""

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from tests.agent.activations import activation, activation_events, dump_if_failed, reminder
from tests.agent.rig import Probe, agent_env
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually
from tests.voice.conftest import QUIET, voice_env, write_preset
from tests.voice.peer import session_updates

pytestmark = [pytest.mark.integration]

OWNER_PHONE = "+15550001111"


@dataclass
class Calling:
    system: System
    standin: StandinProcess
    twilio: TwilioStandin


@pytest.fixture(scope="module")
def calling(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Calling]:
    root = tmp_path_factory.mktemp("activation-call")
    standin = StandinProcess(log_dir=root / "standin").start()
    twilio = TwilioStandin().start()
    env = voice_env(
        standin, **agent_env(standin), ACTIVATION_CALLS="true", PUBLIC_BASE_URL="https://delegate.example.test",
        **twilio.env(owner_phone=OWNER_PHONE),
    )
    system = System(root, env=env)
    failed = request.session.testsfailed
    try:
        system.start_nats()
        write_preset(system, "quiet.json", QUIET)  # no greeting: the session only says why it called
        system.start("ledger", "agent", "voice")
        yield Calling(system, standin, twilio)
    finally:
        dump_if_failed(request, failed, system, standin)
        system.stop()
        twilio.stop()
        standin.stop()


@pytest.fixture
async def probe(calling: Calling) -> AsyncIterator[Probe]:
    assert calling.system.nats is not None
    opened = await Probe.open(calling.system.nats.url)
    yield opened
    await opened.close()


async def test_an_urgent_activation_calls_the_owner_with_the_answer(calling: Calling, probe: Probe) -> None:
    standin, twilio = calling.standin, calling.twilio
    act = activation(reminder("Leave for the airport", urgency="urgent"), urgent=True)
    said = "Your flight boards in an hour: leave for the airport now."
    standin.script({"action": "text", "text": said, "match": {"input_contains": "Leave for the airport"}})
    await probe.publish_input(act)
    events = await activation_events(probe, act.id)
    [outcome] = [e for e in events if e.kind == "activation.outcome"]
    assert outcome.payload["status"] == "completed" and outcome.payload["reply_channel"] == "phone"
    assert "ACTIVATION_CALLS" in outcome.payload["reason"]

    assert len(twilio.calls) == 1 and twilio.calls[0]["to"] == OWNER_PHONE
    updates = await eventually(
        lambda: [u for u in session_updates(standin) if said in str(u.get("instructions"))],
        "the call's Realtime session to be told why it calls",
    )
    assert updates
