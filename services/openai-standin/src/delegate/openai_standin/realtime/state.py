"""What the Realtime routes share across sessions: the script and the session log."""

from dataclasses import dataclass, field

from delegate.openai_standin.realtime.log import RealtimeLog
from delegate.openai_standin.realtime.script import RealtimeScript


@dataclass
class RealtimeState:
    script: RealtimeScript = field(default_factory=RealtimeScript)
    log: RealtimeLog = field(default_factory=RealtimeLog)

    def reset(self) -> None:
        self.script.clear()
        self.log.clear()
