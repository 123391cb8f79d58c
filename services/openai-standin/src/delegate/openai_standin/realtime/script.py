"""Realtime script steps (`POST /_standin/realtime/script`).

Steps apply in order to the following user turns of any session: a turn takes the
next step when its user item appears (a committed audio buffer, or a user message
created with `conversation.item.create`); the response answering that turn uses it.
Responses with no new user turn (a greeting, the answer after a tool result) take
no step. A step with `times: n` serves n turns.

A step with `session_update_error` is no turn's: the next `session.update` of any
session takes it and is answered with that `error` instead of `session.updated`
(the session keeps its configuration)."""


from pydantic import Field, TypeAdapter

from delegate.openai_standin.script import StepQueue, ToolCall, _Strict

# A scripted function call is the same thing on both APIs: one model, so the two cannot drift.
RealtimeToolCall = ToolCall


class RealtimeError(_Strict):
    code: str = "server_error"
    message: str = "The server had an error while processing your request. Sorry about that!"
    type: str = "server_error"


class RealtimeStep(_Strict):
    transcript: str | None = None  # the user's words for this turn (input transcription)
    answer: str | None = None  # the assistant's words
    tool_call: RealtimeToolCall | None = None  # the response is this function call instead
    error: RealtimeError | None = None  # an `error` event instead of a response
    delay_ms: int = Field(default=0, ge=0)  # before the first delta
    disconnect_after_deltas: int | None = Field(default=None, ge=0)  # drop the socket after n audio deltas
    # Answers the next session.update with this error (the step serves no user turn).
    session_update_error: RealtimeError | None = None
    times: int = Field(default=1, ge=1)


steps_adapter: TypeAdapter[list[RealtimeStep]] = TypeAdapter(list[RealtimeStep])


class RealtimeScript(StepQueue[RealtimeStep]):
    def take(self) -> RealtimeStep | None:
        """The next user turn's step."""
        return self._take(lambda step: step.session_update_error is None)

    def take_session_update(self) -> RealtimeError | None:
        """The error the next ``session.update`` answers with, if one is scripted."""
        step = self._take(lambda step: step.session_update_error is not None)
        return step.session_update_error if step is not None else None
