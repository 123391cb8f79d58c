"""What the agent's model work (a turn, a compaction) is built from, declared once.

``Turns`` and ``Compaction`` both call the model under the agent lock with the same parts: both
are dataclasses over ``ModelWork``'s fields, a turn adding its own.
"""

from dataclasses import dataclass

from delegate.runtime.bus import Bus
from delegate.runtime.metering import Meter
from delegate.runtime.openai_client import LazyOpenAI

from .ledger import Ledger
from .settings import Settings
from .status import Status
from .toolbox import Toolbox


@dataclass(eq=False)
class ModelWork:
    settings: Settings
    bus: Bus  # live output (deltas) and the spend line's question
    ledger: Ledger
    client: LazyOpenAI
    toolbox: Toolbox  # its tools count in a compaction's replacement size, as a turn's request has them
    meter: Meter  # every model call's usage, under the fence
    status: Status

