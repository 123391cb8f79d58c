"""The inner plane alone, as a real process beside the real ledger and the real stand-in.

The test plays the producer of committed history (and, where needed, the agent's
answer to an idle check) by appending events through the ledger.
"""

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from functools import partial

import pytest

from delegate.contracts import topics
from delegate.contracts.events import (
    ActivationOutcome,
    Checkpoint,
    ContextCompacted,
    ContextUsage,
    ConversationOpened,
    Event,
    Imported,
    Message,
    Role,
    SessionEnded,
    SessionStarted,
    SpanClosed,
    SpanOpened,
    TaskEvent,
    TermEnded,
    TermStarted,
)
from delegate.contracts.ids import new_id
from delegate.contracts.messages import ActivationInput
from delegate.contracts.signals import (
    AnySignal,
    MemoryRelevant,
    MemoryRelevantPayload,
    ScriptPayload,
    ScriptSignal,
    TaskFinished,
    TaskFinishedPayload,
)
from tests.support.standin import StandinProcess
from tests.support.system import System
from tests.support.waiting import eventually

from .harness import CAPSULE_MARK, MEMORY_MARK, Harness, model_requests, plane_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]


Connect = Callable[[], Awaitable[Harness]]


@pytest.fixture
async def connect(system: System) -> AsyncIterator[Connect]:
    """Test-side bus connections to the system's NATS, closed at the end."""
    opened: list[Harness] = []

    async def _connect() -> Harness:
        opened.append(await Harness.connect(system))
        return opened[-1]

    yield _connect
    for h in opened:
        await h.close()


class Story:
    """One conversation, appended through the ledger the way the agent would write it."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.conversation_id = new_id()
        self.span_id: str | None = None

    async def open(self) -> Event:
        return await self.h.append(ConversationOpened(), conversation_id=self.conversation_id, span_id=None)

    async def span(self) -> Event:
        self.span_id = new_id()
        payload = SpanOpened(type="interaction")
        return await self.h.append(payload, conversation_id=self.conversation_id, span_id=self.span_id)

    async def say(self, role: Role, text: str) -> Event:
        return await self.h.append(
            Message(text=text), conversation_id=self.conversation_id, span_id=self.span_id, role=role
        )

    async def usage(self, tokens: int) -> Event:
        payload = ContextUsage(input_tokens=tokens, total_tokens=tokens, compact_threshold=1000)
        return await self.h.append(payload, conversation_id=self.conversation_id, span_id=self.span_id, channel="inner")

    async def compacted(self) -> Event:
        payload = ContextCompacted(trigger="auto", input_tokens_before=900, input_tokens_after=200)
        return await self.h.append(payload, conversation_id=self.conversation_id, span_id=self.span_id, channel="inner")

    async def checkpoint_and_close(self, after_seq: int, through_seq: int) -> Event:
        """What the agent does when it accepts an idle check."""
        cp = await self.h.append(
            Checkpoint(after_seq=after_seq, through_seq=through_seq),
            conversation_id=self.conversation_id,
            span_id=self.span_id,
            channel="inner",
        )
        await self.h.append(SpanClosed(reason="idle"), conversation_id=self.conversation_id, span_id=self.span_id)
        return cp


async def _started(system: System, standin: StandinProcess, connect: Connect, **env: str) -> Harness:
    system.extra_env.update(plane_env(standin, **env))
    system.start_nats()
    h = await connect()
    await h.stand_in_for_the_agent()
    system.start("ledger", "inner-plane", separate=("ledger", "inner-plane"))
    return h


async def test_idle_span_gets_one_check_and_its_checkpoint_is_extracted_once(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="2")
    story = Story(h)
    await story.open()
    await story.span()
    first_span = story.span_id
    old = await story.say("user", "My favourite colour is green.")
    assert old.seq is not None

    checks = await eventually(lambda: h.idle_checks(first_span), "the first span's idle check")
    assert [c.last_activity_seq for c in checks] == [old.seq]
    assert checks[0].ts >= old.ts + timedelta(seconds=2), "fired before the idle period was over"
    cp1 = await story.checkpoint_and_close(after_seq=0, through_seq=old.seq)

    # Second burst: its checkpoint must see only its own turns, never the earlier "green" one.
    answer = {
        "summary": "Ana's move to Porto.", "decisions": ["Visit Ana in May"], "open_loops": ["Book a ferry"],
        "items": [{"kind": "fact", "text": "Ana lives in Porto"}],
    }
    only_porto = {"instructions_contains": MEMORY_MARK, "input_contains": "Porto"}
    standin.script({"action": "text", "text": json.dumps(answer), "match": only_porto})
    await story.span()
    second_span = story.span_id
    ask = await story.say("user", "My sister Ana moved to Porto last month.")
    reply = await story.say("assistant", "Noted: Ana lives in Porto now.")
    usage = await story.usage(120)
    assert usage.seq is not None
    checks = await eventually(lambda: h.idle_checks(second_span), "the second span's idle check")
    assert [c.last_activity_seq for c in checks] == [usage.seq]
    cp2 = await story.checkpoint_and_close(after_seq=old.seq, through_seq=usage.seq)

    async def both_extracted() -> list[Event] | None:
        found = await h.events(conversation_id=story.conversation_id, kinds=["memory.extracted"])
        return found if len(found) >= 2 else None

    extracted = {e.payload["checkpoint_id"]: e for e in await eventually(both_extracted, "two memory.extracted")}
    assert set(extracted) == {cp1.id, cp2.id}
    first, second = extracted[cp1.id], extracted[cp2.id]
    assert (first.span_id, first.parent_id, first.channel) == (first_span, cp1.id, "inner")
    assert (second.span_id, second.parent_id) == (second_span, cp2.id)
    assert second.payload["items"] == [{"kind": "fact", "text": "Ana lives in Porto"}]
    # The episode: the summary of exactly the checkpoint's range, openable back into its turns.
    assert (second.payload["summary"], second.payload["decisions"], second.payload["open_loops"]) == (
        "Ana's move to Porto.", ["Visit Ana in May"], ["Book a ferry"]
    )
    assert (second.payload["after_seq"], second.payload["through_seq"]) == (old.seq, usage.seq)
    assert second.payload["turn_ids"] == [ask.id, reply.id]
    assert "summary" not in first.payload and first.payload["turn_ids"] == [old.id]  # a plain-text answer
    # The offline stand-in answers plain text: kept as one free-text item, not a failure.
    assert len(first.payload["items"]) == 1 and "green" in first.payload["items"][0]["text"]

    calls = model_requests(standin, MEMORY_MARK)
    assert len(calls) == 2, "one model call per checkpoint"
    second_input = next(c["body"]["input"] for c in calls if "Porto" in c["body"]["input"])
    assert ask.payload["text"] in second_input and reply.payload["text"] in second_input
    assert "green" not in second_input
    for call in calls:
        assert call["body"].get("store") is False and "previous_response_id" not in call["body"]

    # Still exactly one check per span after both spans closed and extraction finished.
    assert len(await h.idle_checks(first_span)) == 1
    assert len(await h.idle_checks(second_span)) == 1
    assert len(await h.events(kinds=["memory.extracted"])) == 2


async def test_a_task_span_is_never_checkpointed_however_long_it_stays_open(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="1")
    task_id = "task-span-1"
    await h.append(SpanOpened(type="task"), conversation_id=None, span_id=task_id, channel="inner")
    await h.append(TaskEvent(task_id=task_id, data={"goal": "read a page"}), conversation_id=None,
                   span_id=task_id, channel="inner", kind="task.created")
    story = Story(h)
    await story.open()
    await story.span()
    said = await story.say("user", "Anything new?")
    # The conversation's span, idle as long as the task's, gets its check: time has passed.
    await eventually(lambda: h.idle_checks(story.span_id), "the conversation span's idle check")
    await h.processed(said.seq or 0)
    assert await h.idle_checks(task_id) == []


async def test_idle_check_still_fires_once_after_everything_is_killed_mid_window(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    idle = 4.0
    # The first process cannot reach the end of the window, however slow the machine: the
    # kill lands inside it by construction. The restarted one has the short window.
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="600")
    story = Story(h)
    await story.open()
    await story.span()
    span_id = story.span_id
    last = await story.say("user", "Remind me about the dentist.")
    assert span_id is not None and last.seq is not None
    await h.processed(last.seq)

    # Everything dies inside the idle window: inner plane, ledger and NATS itself.
    system.extra_env["IDLE_SPAN_SECONDS"] = str(idle)
    await h.close()
    system.kill("inner-plane")
    system.kill("ledger")
    assert system.nats is not None
    system.nats.kill()
    system.nats.start()
    system.restart("ledger")
    system.start("inner-plane")  # a new process: it takes the short window from extra_env
    h = story.h = await connect()

    checks = await eventually(lambda: h.idle_checks(span_id), "the idle check after the restart")
    assert [c.last_activity_seq for c in checks] == [last.seq]
    assert checks[0].ts >= last.ts + timedelta(seconds=idle), "fired before the idle period was over"

    # A restart after it fired must not ask again: the state remembers (once it is saved: the
    # check goes out just before, and a kill in between asks again, which the msg id dedups).
    async def remembered() -> bool:
        return h.fired_seq(span_id) == last.seq

    await eventually(remembered, "the inner plane to remember the check it sent")
    system.kill("inner-plane")
    system.restart("inner-plane")
    await story.checkpoint_and_close(after_seq=0, through_seq=last.seq)
    await story.span()
    barrier = await story.say("user", "Another burst, later.")
    await eventually(lambda: h.idle_checks(story.span_id), "the next span's idle check")
    assert len(await h.idle_checks(span_id)) == 1
    asked = system.procs["inner-plane"].log_text().count(f"span {span_id} idle since")
    assert asked == 1, f"the inner plane asked {asked} times for span {span_id}"
    assert barrier.seq is not None


async def test_an_agent_failover_inside_the_idle_window_is_not_activity(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="2")
    story = Story(h)
    await story.open()
    await story.span()
    last = await story.say("user", "Call the plumber tomorrow.")
    # The lease changes hands mid-window: the agent's own bookkeeping, outside any conversation.
    ended = TermEnded(term_id="S1", reason="shutdown")
    await h.append(ended, conversation_id=None, span_id=None, channel="inner")
    started = await h.append(
        TermStarted(term_id="S2", type="agent", holder="agent-b", supersedes="S1"),
        conversation_id=None, span_id=None, channel="inner",
    )
    assert started.seq is not None
    await h.processed(started.seq)

    checks = await eventually(lambda: h.idle_checks(story.span_id), "the span's idle check")
    assert [c.last_activity_seq for c in checks] == [last.seq], "a term event counted as span activity"
    assert checks[0].ts >= last.ts + timedelta(seconds=2)
    assert not model_requests(standin, CAPSULE_MARK) and not model_requests(standin, MEMORY_MARK)


async def test_capsule_refreshes_once_per_crossing_and_after_compaction(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    # COMPACT_THRESHOLD 1000 x CAPSULE_THRESHOLD 0.5: the line is 500 input tokens.
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="600")
    capsule_calls = {"instructions_contains": CAPSULE_MARK}
    for n in ("ONE", "TWO", "THREE"):
        standin.script({"action": "text", "text": f"CAPSULE-{n}: facts so far.", "match": capsule_calls})
    story = Story(h)
    await story.open()
    await story.span()

    async def capsules(count: int) -> list[Event]:
        async def enough() -> list[Event] | None:
            found = await h.events(conversation_id=story.conversation_id, kinds=["context.capsule"])
            return found if len(found) >= count else None

        return await eventually(enough, f"{count} context.capsule event(s)")

    t1 = await story.say("user", "Turn one: I live in Lisbon.")
    t2 = await story.say("assistant", "Turn two: noted, Lisbon.")
    await story.usage(100)
    t3 = await story.say("user", "Turn three: I prefer short answers.")
    t4 = await story.say("assistant", "Turn four: understood.")
    crossing = await story.usage(600)
    first = (await capsules(1))[0]
    assert first.payload["reason"] == "threshold" and first.payload["text"].startswith("CAPSULE-ONE")
    assert first.payload["through_seq"] == crossing.seq and first.payload["through_event_id"] == crossing.id
    # The conversation's, in no span: the span open when it was asked for may close before it lands.
    assert (first.span_id, first.channel, first.kind) == (None, "inner", "context.capsule")
    calls = model_requests(standin, CAPSULE_MARK)
    assert len(calls) == 1
    assert "(none yet)" in calls[0]["body"]["input"]
    for turn in (t1, t2, t3, t4):
        assert turn.payload["text"] in calls[0]["body"]["input"]

    # Above the line again and again: no refresh on every turn.
    t5 = await story.say("user", "Turn five: my cat is called Miso.")
    t6 = await story.say("assistant", "Turn six: hello Miso.")
    await story.usage(700)
    above = await story.usage(800)
    assert above.seq is not None
    await h.processed(above.seq)
    compaction = await story.compacted()
    second = (await capsules(2))[1]
    assert [c.payload["reason"] for c in await capsules(2)] == ["threshold", "compaction"]
    assert second.payload["text"].startswith("CAPSULE-TWO") and second.payload["through_seq"] == compaction.seq
    calls = model_requests(standin, CAPSULE_MARK)
    assert len(calls) == 2
    latest = calls[1]["body"]["input"]
    assert "CAPSULE-ONE" in latest and t5.payload["text"] in latest and t6.payload["text"] in latest
    for old in (t1, t2, t3, t4):
        assert old.payload["text"] not in latest, "a turn the previous capsule covers was sent again"

    # The usage fell (compaction) and crosses again: one more refresh.
    await story.usage(200)
    t7 = await story.say("user", "Turn seven: book the train for Friday.")
    await story.usage(650)
    third = (await capsules(3))[2]
    assert third.payload["reason"] == "threshold" and third.payload["text"].startswith("CAPSULE-THREE")
    calls = model_requests(standin, CAPSULE_MARK)
    assert len(calls) == 3
    latest = calls[2]["body"]["input"]
    assert "CAPSULE-TWO" in latest and t7.payload["text"] in latest and t5.payload["text"] not in latest
    for call in calls:
        assert call["body"].get("store") is False and "previous_response_id" not in call["body"]

    assert len(await capsules(3)) == 3
    statuses = [n.status for n in h.notices if n.kind == "context.capsule"]
    assert statuses == ["started"] * 3
    assert {n.conversation_id for n in h.notices} == {story.conversation_id}
    # Capsules never pose as messages.
    messages = await h.events(conversation_id=story.conversation_id, kinds=["message"])
    assert all("CAPSULE" not in m.payload["text"] for m in messages)


async def test_a_call_that_ended_refreshes_the_capsule_with_what_was_said(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="600")
    capsule_calls = {"instructions_contains": CAPSULE_MARK}
    standin.script({"action": "text", "text": "CAPSULE-CALL: the call so far.", "match": capsule_calls})
    story = Story(h)
    await story.open()
    story.span_id = new_id()
    cid, sid = story.conversation_id, story.span_id
    await h.append(SpanOpened(type="phone"), conversation_id=cid, span_id=sid, channel="phone")
    await h.append(SessionStarted(type="phone", session_id="v1"), conversation_id=cid, span_id=sid, channel="phone")
    said = await h.append(Message(text="Call me back about the plumber on Monday."),
                          conversation_id=cid, span_id=sid, channel="phone", role="user")
    # History imported meanwhile (POST /api/import) is committed now but is not what is going on.
    old = Message(text="IMPORTED: the 2019 holiday in Crete.", imported=Imported(import_id="imp-capsule"))
    await h.append(old, conversation_id=new_id(), span_id=new_id(), channel="text", role="user")
    assert not await h.events(conversation_id=cid, kinds=["context.capsule"])  # nothing asks for one mid-call
    ended = await h.append(SessionEnded(type="phone", session_id="v1", reason="caller_hangup"),
                           conversation_id=cid, span_id=sid, channel="phone")

    async def refreshed() -> list[Event] | None:
        found = await h.events(conversation_id=cid, kinds=["context.capsule"])
        return found or None

    [capsule] = await eventually(refreshed, "the capsule refreshed after the call")
    assert capsule.payload["reason"] == "call" and capsule.payload["through_seq"] == ended.seq
    [call] = model_requests(standin, CAPSULE_MARK)
    assert said.payload["text"] in call["body"]["input"]
    assert "IMPORTED" not in call["body"]["input"]


async def test_a_failed_capsule_refresh_is_announced_and_retried(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="600")
    standin.script(
        {"action": "error", "status": 500, "should_retry": False, "match": {"instructions_contains": CAPSULE_MARK}},
        {"action": "text", "text": "CAPSULE-AFTER-FAILURE", "match": {"instructions_contains": CAPSULE_MARK}},
    )
    story = Story(h)
    await story.open()
    await story.span()
    await story.say("user", "Please remember that I am allergic to peanuts.")
    await story.compacted()

    async def capsule() -> list[Event]:
        return await h.events(conversation_id=story.conversation_id, kinds=["context.capsule"])

    events = await eventually(capsule, "the capsule after the retry")
    assert [e.payload["text"] for e in events] == ["CAPSULE-AFTER-FAILURE"]
    notices = [n for n in h.notices if n.kind == "context.capsule"]
    assert [n.status for n in notices] == ["started", "failed", "started"]
    assert "500" in notices[1].detail
    assert len(model_requests(standin, CAPSULE_MARK)) == 2


async def test_signals_are_recorded_and_wake_the_agent_one_batch_at_a_time_urgent_first(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    # One signal per activation: the three need three, and each may only go out once the
    # one before has its outcome. Urgent ones lead.
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="600", ACTIVATION_BATCH_MAX="1")
    story = Story(h)
    await story.open()
    birthday = MemoryRelevantPayload(text="Ana's birthday is in May")
    calm = MemoryRelevant(source="memory", urgency="low", payload=birthday, reply_via="email")
    urgent = ScriptSignal(source="timer", urgency="urgent", payload=ScriptPayload(text="call Ana"))
    urgent2 = TaskFinished(source="task", urgency="urgent", payload=TaskFinishedPayload(task_id="t1"))
    # The calm one comes between the urgent ones: while the first is out, the second urgent one leads.
    raised: list[AnySignal] = [urgent, calm, urgent2]
    for signal in raised:
        await h.bus.publish(topics.INNER_SIGNAL, signal)

    signal_events = [await h.committed(s.id) for s in raised]
    for event, signal in zip(signal_events, raised, strict=True):
        assert (event.kind, event.channel, event.span_id) == ("inner.signal", "inner", None)
        assert event.payload["signal"] == signal.model_dump(mode="json") and event.ts == signal.ts
        assert (event.payload["signal_kind"], event.payload["urgency"]) == (signal.kind, signal.urgency)
        assert event.conversation_id == story.conversation_id
    await h.processed(max(e.seq or 0 for e in signal_events))

    async def activations(count: int) -> list[ActivationInput] | None:
        found = [m for m in await h.agent_inputs() if m.type == "activation"]
        return found if len(found) >= count else None

    sent: list[ActivationInput] = []
    outcomes: list[Event] = []
    for n in range(3):
        sent.append((await eventually(partial(activations, n + 1), f"activation {n + 1}"))[n])
        assert len(sent[n].signal_ids) == 1 and len(sent[n].signals) == 1
        if outcomes:
            # Serialized: made after the previous one's outcome was written, not beside it.
            assert sent[n].ts >= outcomes[-1].ts
        outcomes.append(await h.append(
            ActivationOutcome(status="completed"),
            conversation_id=story.conversation_id,
            span_id=None,
            channel="inner",
            parent_id=sent[n].id,
        ))
    assert sorted(sent[0].signal_ids + sent[1].signal_ids) == sorted([urgent.id, urgent2.id])
    assert sent[0].urgent and sent[1].urgent and not sent[2].urgent
    assert sent[2].signal_ids == [calm.id] and sent[2].signals == [calm.model_dump(mode="json")]
    assert sent[2].reply_via == "email" and sent[0].reply_via is None


async def test_a_lost_state_file_is_rebuilt_from_the_ledger_without_redoing_work(
    system: System, standin: StandinProcess, connect: Connect
) -> None:
    h = await _started(system, standin, connect, IDLE_SPAN_SECONDS="1.5")
    capsule_calls = {"instructions_contains": CAPSULE_MARK}
    for n in ("ONE", "TWO"):
        standin.script({"action": "text", "text": f"CAPSULE-{n}", "match": capsule_calls})
    story = Story(h)
    await story.open()
    await story.span()
    first_span = story.span_id
    said = await story.say("user", "I switched my phone plan to the cheaper one.")
    await story.usage(600)
    checks = await eventually(lambda: h.idle_checks(first_span), "the idle check")
    await story.checkpoint_and_close(after_seq=0, through_seq=checks[0].last_activity_seq)

    async def count(kind: str, n: int) -> list[Event] | None:
        found = await h.events(kinds=[kind])
        return found if len(found) >= n else None

    await eventually(lambda: count("memory.extracted", 1), "memory.extracted")
    await eventually(lambda: count("context.capsule", 1), "the first capsule")

    # The inner plane dies and its progress file is lost: it replays the ledger from seq 0.
    system.kill("inner-plane")
    (system.runtime / "inner-plane" / "state.json").unlink()
    system.restart("inner-plane")
    await story.span()
    later = await story.say("user", "Also, my new number ends in 42.")
    await story.compacted()
    capsules = await eventually(lambda: count("context.capsule", 2), "the capsule after the restart")

    assert [c.payload["reason"] for c in capsules] == ["threshold", "compaction"]
    assert len(await h.events(kinds=["memory.extracted"])) == 1
    assert len(model_requests(standin, MEMORY_MARK)) == 1, "an extracted checkpoint was extracted again"
    calls = model_requests(standin, CAPSULE_MARK)
    assert len(calls) == 2, "a refresh that already happened was redone"
    # The rebuilt state knows the previous capsule and what it covered.
    assert "CAPSULE-ONE" in calls[1]["body"]["input"] and later.payload["text"] in calls[1]["body"]["input"]
    assert said.payload["text"] not in calls[1]["body"]["input"]
    assert len(await h.idle_checks(first_span)) == 1
    asked = system.procs["inner-plane"].log_text().count(f"span {first_span} idle since")
    assert asked == 1, f"the closed span was asked about {asked} times"
