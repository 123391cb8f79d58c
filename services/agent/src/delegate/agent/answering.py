"""What answering an input (a user's, an inner activation) is built from, declared once.

``Inputs`` and ``Activations`` both answer through a turn, record what the answer became and
send its replies under the lease: both are dataclasses over ``Answering``'s fields, ``Inputs``
adding its own.
"""

from dataclasses import dataclass

from .guard import LeaseGuard
from .ledger import Ledger
from .outbound import Outbox
from .redelivery import Redelivery
from .settings import Settings
from .spans import Spans
from .status import Status
from .turn import Turns


@dataclass(eq=False)
class Answering:
    settings: Settings
    ledger: Ledger
    outbox: Outbox  # an answer's SMS, email or call, published once the lease is confirmed
    status: Status
    guard: LeaseGuard
    spans: Spans
    redelivery: Redelivery
    turns: Turns

