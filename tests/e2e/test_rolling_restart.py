"""Rolling restarts during a live chat (#17): every service, SIGTERM and then SIGKILL, NATS too.

A client that behaves as the browser page does (tests/e2e/browser_chat.py) chats 200 turns
without pause while, one by one, each process is stopped (first round SIGTERM, second round
SIGKILL) and started again on the same store: on one nats-server (restarted too), and on the
three-node cluster with NATS_REPLICAS=3 (each node restarted in turn, the next one only once
every stream has caught up). Each restart lands on a turn in flight: the gateway's SIGTERM as
the message goes out; its SIGKILL with the message unread (the gateway is frozen with SIGSTOP
just before it is sent, so it is never acknowledged and must be sent again); every other one
once the answer is streaming (the stand-in answers those turns slowly). The client reconnects
by itself and re-sends what was not acknowledged with the same client_msg_id. At the end the
ledger holds every user message exactly once, each answered exactly once, and the client saw
the history the ledger holds, each event once.
"""

import asyncio
import logging
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from delegate.contracts import topics
from delegate.contracts.events import Event
from delegate.contracts.messages import QueryRequest
from delegate.launcher.procs import NatsServer
from delegate.runtime.bus import Bus
from tests.agent.conftest import make_system  # noqa: F401 - a fixture (standin: conftest.py)
from tests.e2e.browser_chat import BrowserChat
from tests.support.cluster import NatsCluster
from tests.support.standin import StandinProcess
from tests.support.system import System, probe_bus, run_sync
from tests.support.waiting import eventually

logger = logging.getLogger(__name__)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TURNS = 200
SERVICES = ("ledger", "agent", "inner-plane", "memory", "tasks", "voice", "pollers", "gateway")
ROLLING = ("gateway", "ledger", "agent", "inner-plane", "voice", "pollers", "memory", "tasks")
# The stand-in answers a restart's turn word by word (~1.5 s), so the restart lands mid-answer.
SLOW_ANSWER = " ".join(f"word{n}" for n in range(30))


def said(i: int) -> str:
    return f"Turn {i:03d}: still here?"


def steps(nats: list[str]) -> list[tuple[str, str]]:
    """Every process twice: a graceful stop in the first round, a crash in the second."""
    names = [*ROLLING, *nats]
    return [(name, "SIGTERM") for name in names] + [(name, "SIGKILL") for name in names]


def restart(system: System, name: str, how: str) -> dict[str, Any]:
    """Stop (SIGTERM, drained) or kill one process, start it again, wait until it answers."""
    began = time.monotonic()
    if name.startswith("nats"):
        nats = system.nats
        server: NatsServer
        if name == "nats":
            assert isinstance(nats, NatsServer)
            server = nats
        else:  # "nats:<node>", one node of the cluster
            assert isinstance(nats, NatsCluster)
            server = nats.node(name.split(":")[1])
        assert server.proc is not None
        (server.stop if how == "SIGTERM" else server.kill)()
        assert server.proc.proc is not None
        code = server.proc.proc.returncode
        graceful = code == 0
        server.start()
        if isinstance(system.nats, NatsCluster):
            run_sync(replicas_current(system.nats))
        system.wait_ready(list(system.procs), timeout=60)
    else:
        proc = system.procs[name]
        before = len(proc.log_text())
        if how == "SIGTERM":
            code = proc.stop()
        else:
            proc.kill()
            assert proc.proc is not None
            code = proc.proc.returncode
        # uvicorn re-raises SIGTERM once it has shut down, so a drained gateway exits -15.
        graceful = code == 0 or (
            name == "gateway"
            and code == -signal.SIGTERM
            and "Application shutdown complete" in proc.log_text()[before:]
        )
        proc.start()
        system.wait_ready([name], timeout=60)
    return {
        "service": name,
        "signal": how,
        "exit": code,
        "graceful": graceful,
        "seconds": round(time.monotonic() - began, 2),
    }


async def replicas_current(cluster: NatsCluster, timeout: float = 60.0) -> None:
    """A restarted node has caught up: every replicated stream has its two followers current
    (the next node may go down only then, or a stream would lose its quorum)."""
    bus = await Bus.connect(cluster.url, "test-probe")
    behind: list[str] = []

    async def current() -> bool:
        behind.clear()
        try:
            for info in await bus.js.streams_info():
                peers = info.cluster.replicas if info.cluster else None
                if info.config.num_replicas == 3 and not (
                    info.cluster
                    and info.cluster.leader
                    and len(peers or []) == 2
                    and all(p.current for p in peers or [])
                ):
                    behind.append(str(info.config.name))
        except Exception as exc:  # the meta leader is being elected
            behind.append(repr(exc))
        return not behind

    try:
        await eventually(current, "every replicated stream's followers current", timeout, interval=0.1,
                         explain=lambda: f"behind: {behind}")
    finally:
        await bus.close()


async def ledger_messages(system: System) -> list[Event]:
    """Every message and failed turn the ledger committed, by seq."""
    found: list[Event] = []
    after = 0
    async with probe_bus(system) as bus:
        while True:
            reply = await bus.request(
                topics.LEDGER_QUERY, QueryRequest(after_seq=after, kinds=["message", "turn.failed"], limit=1000)
            )
            found += reply.events
            if not reply.more or not reply.events:
                return found
            after = reply.events[-1].seq or after


async def test_every_service_restarted_during_a_200_turn_chat_loses_and_doubles_nothing(
    make_system: Callable[..., System],  # noqa: F811
    standin: StandinProcess,
) -> None:
    system = make_system().start(*SERVICES, separate=True)
    await rolling_chat(system, standin, steps(["nats"]))


@pytest.mark.timeout(300)  # ~100 s alone; a SIGKILLed node takes seconds to catch up
async def test_on_the_three_node_cluster_every_node_is_restarted_too(
    make_system: Callable[..., System],  # noqa: F811
    standin: StandinProcess,
    tmp_path: Path,
) -> None:
    system = make_system(NATS_REPLICAS="3")
    system.nats = await asyncio.to_thread(NatsCluster(tmp_path / "cluster").start)
    await asyncio.to_thread(lambda: system.start(*SERVICES, separate=True))  # restarted one by one
    await rolling_chat(system, standin, steps(["nats:n0", "nats:n1", "nats:n2"]))


async def rolling_chat(system: System, standin: StandinProcess, plan: list[tuple[str, str]]) -> None:
    """Chat TURNS turns while ``plan`` restarts process after process; then count everything."""
    # The turn of each step, spread evenly; the stand-in answers those slowly.
    due = [(k + 1) * TURNS // (len(plan) + 1) for k in range(len(plan))]
    standin.script(
        *[
            {
                "action": "slow",
                "delay_ms": 50,
                "text": SLOW_ANSWER,
                "match": {"input_contains": said(turn)},
                "times": 4,
            }  # a rerun after a crash is slow too
            for turn in due
        ]
    )
    chat = BrowserChat(system)
    chat.start()
    cids = [f"roll-{i:03d}" for i in range(TURNS)]
    restarts: list[dict[str, Any]] = []
    # Turn -> what happens just before it is sent: the gateway that crashes is frozen first, so
    # the message sits unread in its socket, is never acknowledged, and must be sent again.
    before_send: dict[int, Any] = {}
    unacked: list[str] = []

    def pause_gateway() -> None:
        proc = system.procs["gateway"].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)

    async def roll() -> None:
        for (name, how), turn in zip(plan, due, strict=True):
            cid = cids[turn]
            if name == "gateway" and how == "SIGKILL":
                before_send[turn] = pause_gateway
                unacked.append(cid)
            # The checks below are awaited before the loop moves on: they see this turn's variables.
            if name == "gateway":
                await chat.wait_for(lambda: cid in chat.pending, f"turn {turn} to be sent", timeout=120)  # noqa: B023
            else:
                await chat.wait_for(lambda: chat.streaming(cid), f"turn {turn} to stream", timeout=120)  # noqa: B023
            in_flight = chat.answer_to(cid) is None
            step = await asyncio.to_thread(restart, system, name, how)
            restarts.append({**step, "turn": turn, "in_flight": in_flight})
            chat.wake()  # the chat may go on to the next restart's turn

    roller: asyncio.Task[None] | None = None
    try:
        await chat.wait_for(lambda: chat.status == "live", "the first connect")
        roller = asyncio.create_task(roll())
        for i, cid in enumerate(cids):
            # The chat goes on while a process restarts, but the turn of the next restart waits
            # for the one before to finish (so that every restart lands on its own turn).
            earlier = sum(1 for turn in due if turn <= i) - 1  # awaited at once: the lambda sees this value
            await chat.wait_for(
                lambda: len(restarts) >= earlier, f"restart {earlier} before turn {i}", timeout=90  # noqa: B023
            )
            if i in before_send:
                before_send.pop(i)()
            await chat.say(said(i), cid)
            answer = await chat.answered(cid, timeout=60)
            assert answer["kind"] == "message", answer
            if roller.done():
                roller.result()  # a restart that failed fails the test now
        await roller
        delivered = chat.delivered.values()
        logger.info("restarts:\n  %s", "\n  ".join(map(str, restarts)))
        logger.info(
            f"client connects: {chat.connects}, posted over HTTP: {sum(p.posts for p in delivered)}, "
            f"retried: {sum(p.retries for p in delivered)}, error frames: {len(chat.errors)}"
        )
        assert len(restarts) == len(plan)
        assert [s for s in restarts if s["signal"] == "SIGTERM" and not s["graceful"]] == []
        # The message the frozen gateway never read went again, over HTTP, with its client_msg_id.
        assert [cid for cid in unacked if chat.delivered[cid].posts == 0] == []
        assert chat.connects >= 3  # it reconnected by itself after each gateway restart

        # The ledger: each client_msg_id stored once as a user message, each answered once.
        stored = await ledger_messages(system)
        users = [e for e in stored if e.kind == "message" and e.role == "user"]
        assert Counter(e.payload.get("client_msg_id") for e in users) == Counter(cids)
        assert [e for e in stored if e.kind == "turn.failed"] == []
        assistant = [e for e in stored if e.kind == "message" and e.role == "assistant"]
        assert Counter(e.parent_id for e in assistant) == Counter(e.id for e in users)

        # The client: the ledger's history, each event once, every answer seen.
        last = max(e.seq or 0 for e in stored)
        await chat.wait_for(lambda: chat.last_seq >= last, "the last message to arrive")
        assert chat.repeated == []
        assert [e["id"] for e in chat.events if e["kind"] in ("message", "turn.failed")] == [e.id for e in stored]
        for cid, user in zip(cids, users, strict=True):
            assert chat.user_event[cid]["id"] == user.id
            assert [a["id"] for a in chat.answers[user.id]] == [e.id for e in assistant if e.parent_id == user.id]
    finally:
        if roller is not None and not roller.done():
            roller.cancel()
            await asyncio.gather(roller, return_exceptions=True)
        await chat.close()
