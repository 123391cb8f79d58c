"""What the agent's model work (a turn, a compaction) is built from, given once.

``Turns`` and ``Compaction`` both call the model under the agent lock with the same parts; the
agent builds ``ModelParts`` once and hands it to both.
"""

from dataclasses import dataclass

from delegate.runtime.bus import Bus
from delegate.runtime.metering import Meter
from delegate.runtime.openai_client import LazyOpenAI

from .ledger import Ledger
from .settings import Settings
from .status import Status
from .toolbox import Toolbox


@dataclass(frozen=True)
class ModelParts:
    settings: Settings
    bus: Bus  # live output (deltas) and the spend line's question
    ledger: Ledger
    client: LazyOpenAI
    toolbox: Toolbox  # its tools count in a compaction's replacement size, as a turn's request has them
    meter: Meter  # every model call's usage, under the fence
    status: Status


class ModelWork:
    def __init__(self, parts: ModelParts) -> None:
        self.settings = parts.settings
        self.bus = parts.bus
        self.ledger = parts.ledger
        self.client = parts.client
        self.toolbox = parts.toolbox
        self.meter = parts.meter
        self.status = parts.status
