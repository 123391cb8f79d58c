"""Everything one stand-in instance holds, shared by its routes."""

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request

from delegate.openai_standin.engine import Engine
from delegate.openai_standin.realtime.state import RealtimeState
from delegate.openai_standin.recorder import RequestLog
from delegate.openai_standin.script import Script
from delegate.openai_standin.settings import Settings
from delegate.openai_standin.store import ResponseStore


@dataclass
class StandinState:
    settings: Settings
    store: ResponseStore
    script: Script
    requests: RequestLog
    engine: Engine
    realtime: RealtimeState

    @classmethod
    def build(cls, settings: Settings) -> "StandinState":
        store, script = ResponseStore(), Script()
        return cls(settings, store, script, RequestLog(), Engine(settings, store, script), RealtimeState())

    def reset(self) -> None:
        self.realtime.reset()
        self.script.clear()
        self.requests.clear()
        self.store.clear()


def get_state(request: Request) -> StandinState:
    state: StandinState = request.app.state.standin
    return state


StateDep = Annotated[StandinState, Depends(get_state)]


def note(request: Request, **fields: Any) -> None:
    """Add facts to this request's entry in the request log."""
    entry = getattr(request.state, "record", None)
    if entry is not None:
        entry.update(fields)
