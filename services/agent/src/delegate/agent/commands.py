"""Compact now and End conversation (``agent.cmd.compact``, ``agent.cmd.end``): one at a time.

The command slot holds the one compact or end command running, if any: a second one meanwhile
is answered "busy" rather than queued behind it, and a step-down cancels the one running.
"""

import asyncio
from collections.abc import Coroutine
from typing import Any

from delegate.contracts.events import ConversationEnded, make_event
from delegate.contracts.messages import AgentCommand, CommandReply
from delegate.runtime.bus import DomainError

from .compaction import Compaction
from .conversation_state import ConversationState
from .ledger import Ledger
from .spans import Spans
from .status import Status

BUSY = "A response or a compaction is running; try again when it is done."


class Commands:
    def __init__(self, ledger: Ledger, status: Status, spans: Spans, compaction: Compaction) -> None:
        self.ledger = ledger
        self.status = status
        self.spans = spans
        self.compaction = compaction
        # The one compact or end command running, if any: a second one is answered "busy".
        self.task: asyncio.Task[Any] | None = None

    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    def _start(self, coro: Coroutine[Any, Any, Any]) -> "asyncio.Task[Any]":
        task: asyncio.Task[Any] = asyncio.create_task(coro)
        self.task = task
        return task

    async def on_compact(self, _: AgentCommand) -> CommandReply:
        """Start Compact now in the background and answer at once; "busy" while anything runs.

        No await between the checks and the start: nothing else can take the lock or the
        command slot in between, and nothing here can fail while holding either.
        """
        status = self.status
        if self.running() or status.lock.locked() or status.busy or status.compacting:
            raise DomainError("busy", BUSY)
        if status.state.conversation_id is None:
            return CommandReply(ok=True)  # nothing to compact: the next turn starts fresh anyway
        status.compacting = True  # shown at once; the task clears it whatever happens
        self._start(self.compaction.compact_now())
        return CommandReply(ok=True)

    async def on_end(self, _: AgentCommand) -> CommandReply:
        """End the technical conversation after any running turn; history stays, the chain goes.

        Runs as the command slot's task, so a second compact or end meanwhile is "busy"; the
        request waits for it (shielded: a cancelled request does not half-end the conversation).
        """
        if self.running():
            raise DomainError("busy", BUSY)
        task = self._start(self._end_conversation())
        return await asyncio.shield(task)

    async def _end_conversation(self) -> CommandReply:
        status = self.status
        async with status.lock:
            s = status.state
            if s.conversation_id is None:
                return CommandReply(ok=True)
            await self.spans.close_span("conversation_ended")
            await self.ledger.append(
                make_event(
                    ConversationEnded(reason="user"), conversation_id=s.conversation_id, span_id=None, channel="text"
                )
            )
            # The next conversation starts uncompacted, as a restart reads it (state_from_resume).
            status.state = ConversationState(capsule=s.capsule)
            await status.publish()
        return CommandReply(ok=True)

    async def close(self) -> None:
        """The term is over: the command running, if any, is cancelled and awaited."""
        command = self.task
        if command is not None and not command.done():
            command.cancel()
            await asyncio.gather(command, return_exceptions=True)
