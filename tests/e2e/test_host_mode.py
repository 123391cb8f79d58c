"""Every service in one process (``python -m delegate.host``), as ``make run`` runs them.

The same behaviour as a process per service: a chat turn, an SMS turn whose reply Twilio
receives, a phone call, and a reminder set through the agent's tool, all through one host
process. A SIGKILL of that process loses nothing and sends nothing twice: an SMS reply Twilio
already took is verified, not sent again, and input that came while it was down is answered
once. Under the launcher, a SIGKILLed host is started again and every consumer resumes.

Real processes: nats-server, the host, the ledger's writer (started by the hosted ledger), the
OpenAI stand-in and the Twilio stand-in.
"""

import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from delegate.contracts.events import Event
from delegate.contracts.ids import utcnow
from delegate.contracts.messages import UserInput
from delegate.launcher.procs import free_port
from tests.agent.chat import ChatClient
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import Probe
from tests.e2e.test_launcher_stops import _descendants, _running
from tests.e2e.test_phone_call import (
    AUTH_TOKEN,
    OWNER,
    closed_span,
    hear_everything,
    start_call,
    voice_env,
    wait_ledger,
)
from tests.inner_plane.harness import Harness, plane_env
from tests.inner_plane.reminders_rig import fired
from tests.support.speech import phone_audio
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.twilio_standin import TwilioStandin
from tests.support.waiting import eventually_sync

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Memory and tasks call the model on their own (extraction, steps): left out, so that the
# stand-in's scripted answers go to the turns under test.
SERVICES = ("ledger", "agent", "inner-plane", "voice", "pollers", "gateway")
QUESTION = "What time is it?"
ANSWER = "Time for tea."


@pytest.fixture
def twilio() -> Iterator[TwilioStandin]:
    # The gateway checks Twilio's signatures with the token the test signs its calls with.
    standin = TwilioStandin(auth_token=AUTH_TOKEN).start()
    yield standin
    standin.stop()


def host_env(standin: StandinProcess, twilio: TwilioStandin) -> dict[str, str]:
    return {
        # The default compaction threshold: no capsule refresh takes a scripted answer meant for a turn.
        **plane_env(standin, COMPACT_THRESHOLD="200000"), **voice_env(), **twilio.env(owner_phone=OWNER),
        "OWNER_TIMEZONE": "UTC", "IDLE_SPAN_SECONDS": "600",
    }


def sms_from_owner(text: str, sid: str) -> UserInput:
    return UserInput(channel="sms", text=text, client_msg_id=f"sms:{sid}",
                     meta={"from": OWNER, "message_sid": sid, "media": []})


def answers_to(probe: Probe, turn_id: str) -> list[Event]:
    """The committed answers (assistant messages) of one input: exactly one, whatever happened."""
    return [e for e in probe.of_kind("message") if e.role == "assistant" and e.parent_id == turn_id]


async def test_chat_sms_a_call_and_a_reminder_run_through_one_host_process(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]],  # noqa: F811
    standin: StandinProcess, twilio: TwilioStandin,
) -> None:
    system = make_system(**host_env(standin, twilio)).start(*SERVICES, one_process=True)
    assert list(system.procs) == ["host"]
    probe = await probe_for(system)
    chat = await ChatClient.open(system)
    h = await Harness.connect(system)
    call = None
    try:
        # ---- a chat turn ---------------------------------------------------------------------
        standin.script({"action": "text", "text": "Hello from one process."})
        answer = await chat.answer(await chat.send("Hello?"))
        assert answer["kind"] == "message" and answer["payload"]["text"] == "Hello from one process."

        # ---- an SMS turn: the reply reaches Twilio, once ---------------------------------------
        standin.script({"action": "text", "text": "Got it by text."})
        sms = sms_from_owner("Are you there?", "SM" + "5" * 32)
        await probe.publish_input(sms)
        sms_answer = await probe.answer(sms.id)
        assert sms_answer.channel == "sms"
        await probe.wait_for(lambda: twilio.bodies(to=OWNER), "the SMS reply at Twilio")
        assert twilio.bodies(to=OWNER) == ["Got it by text."]

        # ---- a phone call: greeting, a question, its answer, hang up ---------------------------
        standin.realtime_script({"transcript": QUESTION, "answer": ANSWER})
        call, stream = await start_call(system)
        await hear_everything(call, standin, 1, "the greeting")
        await call.speak(phone_audio(QUESTION))
        await hear_everything(call, standin, 2, "the answer")
        await call.hang_up()
        events = await wait_ledger(system, lambda history: closed_span(history, stream.params["session"]),
                                   "the call's span to close")
        said = [e for e in events if e["kind"] == "message"]
        assert [e["role"] for e in said] == ["assistant", "user", "assistant"]
        assert said[1]["payload"]["text"] == QUESTION and said[2]["payload"]["text"] == ANSWER

        # ---- a reminder set through the agent's tool fires once --------------------------------
        at = (utcnow() + timedelta(seconds=5)).replace(microsecond=0)
        standin.script(
            {"action": "tool_call", "name": "set_reminder", "call_id": "call_host_remind",
             "arguments": {"text": "Water the plants", "at": at.isoformat()}},
            {"action": "text", "text": "I'll remind you.", "match": {"has_tool_output": True}},
        )
        asked = UserInput(text="Remind me to water the plants in a few seconds", channel="text")
        await probe.publish_input(asked)
        await probe.answer(asked.id, timeout=60)
        [defined] = [e for e in await h.events(kinds=["reminder.set"])
                     if e.payload["spec"]["text"] == "Water the plants"]
        fires = await fired(h, defined.payload["reminder_id"])
        assert len(fires) == 1
    finally:
        if call is not None:
            await call.close()
        await chat.close()
        await h.close()
    # Every line says which service wrote it.
    log = system.procs["host"].log_text()
    for name in SERVICES:
        assert f" {name} INFO delegate.host: starting (start 1)" in log, name


async def test_a_sigkilled_host_loses_nothing_and_sends_nothing_twice(
    make_system: Callable[..., System], probe_for: Callable[[System], Awaitable[Probe]],  # noqa: F811
    standin: StandinProcess, twilio: TwilioStandin,
) -> None:
    # The killed host's SMS in flight comes back after the outbox's ack wait (60 s by default; the
    # send beats every third of it while it runs, so a short one redelivers nothing early).
    system = make_system(**host_env(standin, twilio), OUTBOX_ACK_WAIT_S="5").start(*SERVICES, one_process=True)
    probe = await probe_for(system)
    standin.script({"action": "text", "text": "Noted, by text."}, {"action": "text", "text": "Back again."})
    # Twilio stores the reply but its answer never reaches the sender: the host dies mid-send.
    twilio.delay_next(60.0, store=True)
    sms = sms_from_owner("Note this down", "SM" + "6" * 32)
    await probe.publish_input(sms)
    await probe.wait_for(lambda: len(twilio.creates()) == 1, "the reply's send to be under way", 40)
    system.kill("host")

    # Input that comes while every service is down waits on the bus.
    later = UserInput(text="Still there?", channel="text")
    await probe.publish_input(later)
    system.procs["host"].start()
    system.wait_ready(SERVICES, timeout=60)

    assert (await probe.answer(later.id, timeout=60)).payload["text"] == "Back again."

    [sms_reply] = answers_to(probe, sms.id)
    [outcome] = await probe.wait_for(
        lambda: [e for e in probe.of_kind("delivery") if e.payload.get("final") and e.payload.get("outbox_id")
                 == sms_reply.id], "the SMS reply's outcome", timeout=60,
    )
    (message,) = twilio.messages
    assert message["body"] == "Noted, by text."
    assert outcome.payload["status"] == "sent" and outcome.payload["external_ids"] == [message["sid"]]
    assert len(twilio.creates()) == 1  # verified with Twilio after the restart, never sent again
    assert len(answers_to(probe, later.id)) == 1


def test_the_launcher_starts_a_sigkilled_host_again_and_every_consumer_resumes(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "NATS_", "TWILIO_", "IMAP_", "SMTP_"))}
    env.pop("DELEGATE_PROCESSES", None)  # the default: one host process
    env.update(DELEGATE_PORT=str(port), RUNTIME_DATA_DIR=str(tmp_path / "rt"), DELEGATE_TOKEN="host-mode-token")
    base = f"http://127.0.0.1:{port}"
    auth = {"Authorization": "Bearer host-mode-token"}
    log_path = tmp_path / "launch.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "delegate.launcher"], env=env, cwd=tmp_path, stdout=log, stderr=log,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
    try:
        eventually_sync(lambda: _ready(base), "/readyz 200", 90)
        children = _descendants(proc.pid)
        hosts = [pid for pid, cmd in children.items() if "delegate.host" in cmd]
        assert len(hosts) == 1, children
        # One host, the ledger's writer below it, nats-server and the offline stand-in: no
        # process of a service of its own.
        assert not [cmd for cmd in children.values() if "delegate.agent" in cmd or "delegate.gateway" in cmd]
        writers = [pid for pid, cmd in children.items() if "delegate.ledger.writer" in cmd]
        assert len(writers) == 1, children

        _chat(base, auth, "first", "m1")
        eventually_sync(lambda: _assistant_answers(base, auth) == 1, "the first answer", 60)
        os.kill(hosts[0], signal.SIGKILL)
        eventually_sync(
            lambda: [p for p, cmd in _descendants(proc.pid).items() if "delegate.host" in cmd and p != hosts[0]],
            "the host to be started again", 30,
        )
        eventually_sync(lambda: _ready(base), "/readyz after the restart", 60)
        # The old writer ends with its host (its stdin closes): no orphan keeps the database.
        eventually_sync(lambda: not _running(writers[0]), "the old writer to end", 15)

        _chat(base, auth, "second", "m2")
        eventually_sync(lambda: _assistant_answers(base, auth) == 2, "the second answer", 60)
        assert "host exited" in log_path.read_text()
        assert _assistant_answers(base, auth) == 2  # the first turn was not answered again

        children = _descendants(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(30) == 0
        eventually_sync(lambda: not any(_running(pid) for pid in children), "every process to end", 10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _ready(base: str) -> bool:
    try:
        return httpx.get(f"{base}/readyz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _chat(base: str, auth: dict[str, str], text: str, client_msg_id: str) -> None:
    sent = httpx.post(f"{base}/api/messages", headers=auth, json={"text": text, "client_msg_id": client_msg_id},
                      timeout=10)
    assert sent.status_code == 202, sent.text


def _assistant_answers(base: str, auth: dict[str, str]) -> int:
    events = httpx.get(f"{base}/api/timeline", headers=auth, timeout=5).json()["events"]
    return sum(1 for e in events if e["kind"] == "message" and e["role"] == "assistant")
