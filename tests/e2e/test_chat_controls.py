"""The chat controls end to end: browser WebSocket and REST → gateway → agent → stand-in → ledger.

Stop, regenerate and edit-and-resend, their acks, and the stable error codes a client acts on
(not_found 404, not_last 409, busy 409, nothing_to_stop 409).
"""

import asyncio
import json
import os
import signal
from collections.abc import Callable
from typing import Any

import pytest
from nats.aio.msg import Msg

from delegate.contracts import subjects
from tests.agent.chat import ChatClient, api
from tests.agent.conftest import make_system, probe_for  # noqa: F401 - fixtures (standin: conftest.py)
from tests.agent.rig import input_texts, response_bodies
from tests.ledger.test_crash import _writer_pid
from tests.support.standin import StandinProcess
from tests.support.system import System, probe_bus

pytestmark = [pytest.mark.integration]

LONG = " ".join(f"part{i}" for i in range(150)) + "."


async def control(chat: ChatClient, kind: str, turn_id: str) -> dict[str, Any]:
    """Send a stop/regenerate frame; the ack or error frame that answers it."""
    before = len(chat.frames)
    await chat.ws.send(json.dumps({"type": kind, "turn_id": turn_id}))
    return await chat.wait_for(
        lambda: next(
            (f for f in chat.frames[before:] if f["type"] in ("ack", "error") and f.get("request") == kind), None
        ),
        f"the {kind} answer",
    )


async def send_edit(chat: ChatClient, text: str, supersedes: str, client_msg_id: str) -> dict[str, Any]:
    before = len(chat.frames)
    await chat.ws.send(
        json.dumps({"type": "message", "text": text, "client_msg_id": client_msg_id, "supersedes": supersedes})
    )
    return await chat.wait_for(
        lambda: next(
            (f for f in chat.frames[before:] if f["type"] in ("ack", "error") and f.get("request") == "message"),
            None,
        ),
        "the message answer",
    )


def answers(chat: ChatClient, turn_id: str) -> list[dict[str, Any]]:
    return [e for e in chat.events("message") if e["role"] == "assistant" and e["parent_id"] == turn_id]


async def test_stop_regenerate_and_edit_over_the_websocket(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway")
    chat = await ChatClient.open(system)
    try:
        # Stop: acked, the partial answer kept and marked stopped; then nothing to stop.
        standin.script({"action": "slow", "delay_ms": 120, "text": LONG})
        story = await chat.send("Tell me everything", client_msg_id="s-1")
        await chat.wait_for(lambda: len(chat.deltas(story)) >= 3, "a few deltas")
        ack = await control(chat, "stop", story)
        assert ack == {"type": "ack", "request": "stop", "turn_id": story, "ok": True}
        stopped = await chat.answer(story)
        assert stopped["payload"]["stopped"] is True and LONG.startswith(stopped["payload"]["text"])
        refused = await control(chat, "stop", story)
        assert (refused["type"], refused["code"], refused["turn_id"]) == ("error", "nothing_to_stop", story)

        # Regenerate the stopped answer: a new attempt, from before it.
        standin.script({"action": "text", "text": "A complete answer this time."})
        ack = await control(chat, "regenerate", story)
        assert ack == {"type": "ack", "request": "regenerate", "turn_id": story, "ok": True}
        await chat.wait_for(lambda: len(answers(chat, story)) == 2, "the regenerated answer")
        second = answers(chat, story)[-1]
        assert second["payload"]["text"] == "A complete answer this time."
        assert (second["payload"]["attempt"], second["payload"]["regenerates"]) == (2, stopped["id"])
        assert chat.streamed_text(story) == "A complete answer this time."
        body = response_bodies(standin)[-1]
        assert "previous_response_id" not in body and input_texts(body) == ["Tell me everything"]

        # Edit-and-resend the last question: a new message that supersedes it.
        standin.script({"action": "text", "text": "Here is the short version."})
        ack = await send_edit(chat, "Tell me the short version", story, "e-1")
        assert ack["type"] == "ack" and ack["duplicate"] is False, ack
        edited = ack["event_id"]
        await chat.answer(edited)
        user = next(e for e in chat.events("message") if e["id"] == edited)
        assert user["payload"]["supersedes"] == story
        assert input_texts(response_bodies(standin)[-1]) == ["Tell me the short version"]
        # The same edit sent again (a retry) is a duplicate, not a second message.
        again = await send_edit(chat, "Tell me the short version", story, "e-1")
        assert (again["type"], again["event_id"], again["duplicate"]) == ("ack", edited, True)

        # Only the last turn: the superseded question can be neither regenerated nor edited.
        refused = await control(chat, "regenerate", story)
        assert refused["code"] == "not_last"
        refused = await send_edit(chat, "once more", story, "e-2")
        assert refused["type"] == "error" and refused["code"] == "not_last"
        refused = await control(chat, "regenerate", "no-such-message")
        assert refused["code"] == "not_found"
        # Every message and answer is still in history: nothing was rewritten.
        texts = [e["payload"]["text"] for e in chat.events("message")]
        assert "Tell me everything" in texts and "Tell me the short version" in texts
    finally:
        await chat.close()


async def test_turn_controls_over_rest_with_stable_codes(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    system = make_system().start("ledger", "agent", "gateway")
    chat = await ChatClient.open(system)
    try:
        async with api(system) as http:
            standin.script({"action": "slow", "delay_ms": 150, "text": LONG})
            posted = (await http.post("/api/messages", json={"text": "Go on and on"})).json()
            turn = posted["event_id"]
            await chat.wait_for(lambda: len(chat.deltas(turn)) >= 2, "deltas")

            # While it streams: busy for regenerate and edit.
            reply = await http.post(f"/api/turns/{turn}/regenerate")
            assert (reply.status_code, reply.json()["error"]["code"]) == (409, "busy")
            reply = await http.post("/api/messages", json={"text": "edit", "supersedes": turn})
            assert (reply.status_code, reply.json()["error"]["code"]) == (409, "busy")

            reply = await http.post(f"/api/turns/{turn}/stop")
            assert reply.status_code == 200 and reply.json() == {"ok": True, "turn_id": turn}
            stopped = await chat.answer(turn)
            assert stopped["payload"]["stopped"] is True
            reply = await http.post(f"/api/turns/{turn}/stop")
            assert (reply.status_code, reply.json()["error"]["code"]) == (409, "nothing_to_stop")

            standin.script({"action": "text", "text": "Regenerated over REST."})
            reply = await http.post(f"/api/turns/{turn}/regenerate")
            assert reply.status_code == 202 and reply.json()["turn_id"] == turn
            await chat.wait_for(lambda: len(answers(chat, turn)) == 2, "the new attempt")
            assert answers(chat, turn)[-1]["id"] == reply.json()["input_id"]

            reply = await http.post("/api/turns/nope/regenerate")
            assert (reply.status_code, reply.json()["error"]["code"]) == (404, "not_found")
            standin.script({"action": "text", "text": "Edited over REST."})
            reply = await http.post("/api/messages", json={"text": "Edited", "supersedes": turn})
            assert reply.status_code == 202
            await chat.answer(reply.json()["event_id"])
            reply = await http.post(f"/api/turns/{turn}/regenerate")
            assert (reply.status_code, reply.json()["error"]["code"]) == (409, "not_last")
    finally:
        await chat.close()


async def test_a_control_on_a_message_the_ledger_has_not_committed_yet_waits_for_it(
    make_system: Callable[..., System], standin: StandinProcess  # noqa: F811
) -> None:
    """A message is acknowledged once JetStream has it; the ledger commits it a moment later, and
    meanwhile its answer may already stream. A regenerate asked then was told 404 "no such
    message" (once in a full run). Here the ledger's writer is frozen, so the ledger answers
    reads but commits nothing: the control keeps asking (the test sees its reads on the bus)
    until the writer goes on, then answers as for any streaming turn."""
    system = make_system().start("ledger", "agent", "gateway", separate=("ledger",))
    writer = _writer_pid(system.procs["ledger"].pid)
    assert writer is not None
    chat = await ChatClient.open(system)
    try:
        async with api(system) as http, probe_bus(system) as bus:
            standin.script({"action": "slow", "delay_ms": 150, "text": LONG})
            os.kill(writer, signal.SIGSTOP)
            try:
                turn = (await http.post("/api/messages", json={"text": "Go on and on"})).json()["event_id"]
                asked: list[bytes] = []

                async def seen(msg: Msg) -> None:
                    if turn.encode() in msg.data:
                        asked.append(msg.data)

                watch = await bus.nc.subscribe(subjects.LEDGER_GET, cb=seen)
                regenerate = asyncio.create_task(http.post(f"/api/turns/{turn}/regenerate"))
                await chat.wait_for(lambda: len(asked) >= 2 or regenerate.done(), "the control to ask again")
                assert not regenerate.done(), regenerate.result().text  # answered 404 at the first read
            finally:
                os.kill(writer, signal.SIGCONT)
            reply = await regenerate
            await watch.unsubscribe()
            assert (reply.status_code, reply.json()["error"]["code"]) == (409, "busy")
    finally:
        await chat.close()
